#!/bin/sh
# ctest for scripts/plot_metrics.sh: a small metrics file (fp16-like: skipped steps, a falling scale, evals)
# renders to a PNG, alone and beside a second run; a missing file, an empty file and a file without step records
# fail with one line that names the file.
# Exits 77 (ctest SKIP_RETURN_CODE) when gnuplot is not installed.
#   plot_metrics_test.sh PATH/TO/plot_metrics.sh
set -u
script=$1
command -v gnuplot >/dev/null 2>&1 || { echo "gnuplot not installed: skipped"; exit 77; }

work=$(mktemp -d "${TMPDIR:-/tmp}/plot_metrics_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...: counts a failure when the command fails
  what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}

cat >"$work/run.jsonl" <<'JSON'
{"step": 1, "epoch": 0, "loss": 2.30258512, "lr": 0.001, "scale": 65536, "skipped": true, "grad_norm": null, "samples_per_s": 4512.25}
{"step": 2, "epoch": 0, "loss": 2.10000002, "lr": 0.001, "scale": 32768, "skipped": false, "grad_norm": 1.5, "samples_per_s": 4600}
{"step": 3, "epoch": 0, "loss": null, "lr": 0.001, "scale": 32768, "skipped": true, "grad_norm": null, "samples_per_s": 4700}
{"step": 4, "epoch": 0, "loss": 1.5, "lr": 0.001, "scale": 16384, "skipped": false, "grad_norm": 1.25, "samples_per_s": 4650}
{"event": "eval", "step": 4, "epoch": 0, "loss": 1.45000005, "accuracy": 0.8412}
{"step": 5, "epoch": 1, "loss": 1.20000005, "lr": 0.001, "scale": 16384, "skipped": false, "grad_norm": 1, "samples_per_s": 4700}
{"event": "summary", "steps": 5, "skipped_steps": 2, "final_scale": 16384, "test_accuracy": 0.85, "samples_per_s": 4650, "wall_s": 1.5}
JSON

png_signature() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }
check "renders a PNG" sh "$script" "$work/run.jsonl" "$work/run.png"
check "the PNG starts with the PNG signature" png_signature "$work/run.png"

# fp32-like: a constant scale of 1, no skipped steps, no evals.
grep -v '"event"' "$work/run.jsonl" | sed 's/"scale": [0-9]*/"scale": 1/; s/"skipped": true/"skipped": false/' \
  >"$work/fp32.jsonl"
check "renders a constant-scale run" sh "$script" "$work/fp32.jsonl" "$work/fp32.png"
check "its PNG has the signature" png_signature "$work/fp32.png"

# Two runs side by side (one with evals, one without).
check "renders two runs side by side" sh "$script" "$work/run.jsonl" "$work/fp32.jsonl" "$work/both.png"
check "their PNG has the signature" png_signature "$work/both.png"

# fails_with STATUS PATTERN ARGS...: the script exits STATUS and prints one line matching PATTERN.
fails_with() {
  want=$1
  pattern=$2
  shift 2
  sh "$script" "$@" >"$work/out" 2>&1
  got=$?
  [ "$got" -eq "$want" ] && [ "$(wc -l <"$work/out")" -eq 1 ] && grep -q "$pattern" "$work/out" ||
    { echo "  exit $got, output: $(cat "$work/out")"; return 1; }
}
: >"$work/empty.jsonl"
grep '"event"' "$work/run.jsonl" >"$work/no_steps.jsonl"
check "a missing file" fails_with 1 "no_such.jsonl: no such file" "$work/no_such.jsonl" "$work/x.png"
check "an empty file" fails_with 1 "empty.jsonl: empty file" "$work/empty.jsonl" "$work/x.png"
check "no step records" fails_with 1 "no step records" "$work/no_steps.jsonl" "$work/x.png"
check "an output folder that does not exist" fails_with 1 "cannot create" "$work/run.jsonl" "$work/none/x.png"
check "a bad second run is named" fails_with 1 "empty.jsonl: empty file" "$work/run.jsonl" "$work/empty.jsonl" "$work/x.png"
check "wrong arguments" fails_with 2 "usage" "$work/run.jsonl"

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
