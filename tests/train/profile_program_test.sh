#!/bin/sh
# ctest for mantissa-train --profile and --report=speed|memory: short runs of the MLP, CNN and GPT on
# synthetic data print the per-op table and write a Chrome trace that parses, holds the Trainer's phases, ops
# with their input shapes, and the memory track; the speed report compares fp32, bf16 and fp16 with a verdict,
# its JSON and picture; the memory report gives the parts and the batch a budget allows; a trace path that
# cannot be written exits 1 before training, naming the file, with no file left behind; bad flags exit 2.
#   profile_program_test.sh PATH/TO/mantissa-train
set -u
prog=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/profile_program_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }

# The trace's checks, in Python's json module: "X" events with the format's fields, nested per thread.
check_trace() {  # check_trace FILE OP...
  python3 - "$@" <<'PY'
import json, sys
path, want = sys.argv[1], sys.argv[2:]
t = json.load(open(path))
spans = [e for e in t["traceEvents"] if e["ph"] == "X"]
names = {e["name"] for e in spans}
missing = [n for n in want + ["data", "forward", "backward", "optimizer"] if n not in names]
assert not missing, f"no events named {missing}"
assert any(e["ph"] == "C" for e in t["traceEvents"]), "no memory counter"
assert any("Input Dims" in e["args"] for e in spans), "no input shapes"
stack = {}
for e in spans:
    s = stack.setdefault(e["tid"], [])
    while s and s[-1] <= e["ts"]:
        s.pop()
    end = e["ts"] + e["dur"]
    assert not s or end <= s[-1] + 1e-3, f"{e['name']} overlaps its parent"
    s.append(end)
print(f"{len(spans)} events")
PY
}

run_model() {  # run_model MODEL OP... (the ops its trace must hold)
  model=$1
  shift
  if "$prog" --model="$model" --data=synthetic --max_steps=3 --profile_wait=1 --profile_steps=1 --progress=none \
      --eval_batches=1 --sample_chars=0 --n_layer=1 --n_embd=64 --block_size=32 --batch_size=8 \
      --profile="$work/$model.json" >"$work/out" 2>&1 &&
    grep -q "^Name .*Self %.*%peak" "$work/out" && grep -q "^trace: $work/$model.json" "$work/out" &&
    check_trace "$work/$model.json" "$@" >"$work/check" 2>&1; then
    ok "--model=$model --profile: table, trace with $(cat "$work/check")"
  else
    fail "--model=$model --profile: $(cat "$work/out" "$work/check" 2>/dev/null | tail -5)"
  fi
}
run_model mlp matmul linear_act  # Sequential runs each Linear + ReLU as linear_act
run_model cnn conv2d conv2d_backward matmul
run_model gpt matmul linear_act scaled_dot_product_attention layer_norm add_layer_norm

# --report=speed: the three precisions side by side, a verdict, the JSON and the picture.
if "$prog" --model=mlp --data=synthetic --report=speed --profile_wait=1 --profile_steps=1 --batch_size=32 \
    --report_out="$work/r" >"$work/out" 2>&1 &&
  grep -q "^step time " "$work/out" && grep -q "GEMM, attention, convolution" "$work/out" &&
  grep -q "^bf16 is .*x fp32" "$work/out" && grep -q "^fp16 is .*x fp32" "$work/out" &&
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert [p["precision"] for p in d["precisions"]] == ["fp32", "bf16", "fp16"]' \
    "$work/r_speed.json" && [ -s "$work/r_speed.png" ]; then
  ok "--report=speed: table, verdict, $work/r_speed.json, .png"
else
  fail "--report=speed: $(tail -8 "$work/out")"
fi

# --report=memory: the parts per precision, and the batch that fits a budget, checked by a step.
if "$prog" --model=mlp --data=synthetic --report=memory --batch_size=32 --memory_budget=75 >"$work/out" 2>&1 &&
  grep -q "^activations kept for backward" "$work/out" && grep -q "the largest batch within it is" "$work/out" &&
  grep -q "within the budget" "$work/out"; then
  ok "--report=memory: parts, and $(grep -o 'the largest batch within it is .*' "$work/out")"
else
  fail "--report=memory: $(tail -8 "$work/out")"
fi
expect_report_error() {  # expect_report_error STATUS WORD ARGS...
  want=$1
  word=$2
  shift 2
  "$prog" "$@" >"$work/out" 2>"$work/err"
  status=$?
  if [ "$status" -eq "$want" ] && grep -q -- "$word" "$work/err"; then
    ok "$* -> exit $want: $(cat "$work/err")"
  else
    fail "$* -> exit $status: $(cat "$work/err")"
  fi
}
expect_report_error 2 "expected precision | speed | memory" --report=bogus
expect_report_error 2 "--memory_budget" --report=memory --memory_budget=-1
expect_report_error 1 "$work/none/r" --model=mlp --data=synthetic --report=speed --report_out="$work/none/r"

# A path that cannot be written: exit 1 before training, one line naming it, nothing left.
"$prog" --model=mlp --data=synthetic --max_steps=2 --progress=none --profile="$work/no/such/dir/t.json" \
  >"$work/out" 2>"$work/err"
status=$?
if [ "$status" -eq 1 ] && grep -q -- "--profile=$work/no/such/dir/t.json" "$work/err" && ! grep -q "^done" "$work/out" &&
  [ ! -e "$work/no" ]; then
  ok "unwritable trace path -> exit 1: $(cat "$work/err")"
else
  fail "unwritable trace path -> exit $status: $(cat "$work/err")"
fi

# A window of no steps is a usage error.
"$prog" --profile="$work/t.json" --profile_steps=0 >"$work/out" 2>"$work/err"
status=$?
if [ "$status" -eq 2 ] && grep -q -- "--profile_steps" "$work/err"; then
  ok "--profile_steps=0 -> exit 2: $(cat "$work/err")"
else
  fail "--profile_steps=0 -> exit $status: $(cat "$work/err")"
fi

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
