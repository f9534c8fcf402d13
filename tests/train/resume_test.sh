#!/bin/sh
# Issue 6's exact resume, end to end through mantissa-train: a run stopped at step STOP and resumed with
# --resume=latest logs the same loss, bit for bit, at every later step as the run that never stopped, and
# their final checkpoints' /model groups are identical (h5diff). For fp32, fp16 and bf16, SGD and Adam, in
# the middle of an epoch, and for fp16 right after the loss scaler backed off.
#   resume_test.sh PATH/TO/mantissa-train
set -u
prog=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/resume_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
common="--data=synthetic --mlp_hidden=64,32 --batch_size=32 --eval_every=1000 --eval_batches=1 --progress=none --threads=2"
steps_and_losses() { grep '^{"step"' "$1" | sed 's/^{"step": \([0-9]*\), "epoch": \([0-9]*\), "loss": \([^,]*\),.*"scale": \([^,]*\),.*/\1 \2 \3 \4/'; }

check() {  # check NAME STOP FLAGS...
  name=$1 stop=$2
  shift 2
  total=40
  d="$work/$name"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  "$prog" $common "$@" --max_steps=$total --checkpoint_dir="$d/full" --metrics="$d/full.jsonl" >"$d/full.out" 2>&1 ||
    { echo "FAILED: $name: the unbroken run failed"; cat "$d/full.out"; failures=$((failures + 1)); return; }
  # shellcheck disable=SC2086
  "$prog" $common "$@" --max_steps=$stop --checkpoint_dir="$d/part" >"$d/first.out" 2>&1 ||
    { echo "FAILED: $name: the first half failed"; cat "$d/first.out"; failures=$((failures + 1)); return; }
  # shellcheck disable=SC2086
  "$prog" $common "$@" --max_steps=$total --checkpoint_dir="$d/part" --resume=latest --metrics="$d/resumed.jsonl" \
    >"$d/resumed.out" 2>&1 ||
    { echo "FAILED: $name: the resumed run failed"; cat "$d/resumed.out"; failures=$((failures + 1)); return; }
  steps_and_losses "$d/full.jsonl" | awk -v s="$stop" '$1 > s' >"$d/full.txt"
  steps_and_losses "$d/resumed.jsonl" >"$d/resumed.txt"
  if ! cmp -s "$d/full.txt" "$d/resumed.txt"; then
    echo "FAILED: $name: step/epoch/loss/scale after step $stop differ:"; diff "$d/full.txt" "$d/resumed.txt" | head -5
    failures=$((failures + 1)); return
  fi
  if ! h5diff "$d/full/step_$total.h5" "$d/part/step_$total.h5" /model /model >"$d/h5diff.out" 2>&1; then
    echo "FAILED: $name: final weights differ:"; head -5 "$d/h5diff.out"; failures=$((failures + 1)); return
  fi
  echo "ok: $name: $(wc -l <"$d/resumed.txt") steps after $stop identical, final /model identical"
}

for p in fp32 fp16 bf16; do
  for o in sgd adam; do
    check "$p-$o" 17 --precision=$p --optimizer=$o --lr=0.01
  done
done
# fp16 starting at a scale that overflows: steps 1-3 are skipped and each backs the scale off; the stop
# right after the third backoff must carry the scale, the growth tracker and the skip count.
check fp16-after-backoff 3 --precision=fp16 --optimizer=adam --init_scale=1e12 --growth_interval=5
grep -q '"skipped": true' "$work/fp16-after-backoff/full.jsonl" || { echo "FAILED: no skipped step in the backoff case"; failures=$((failures + 1)); }

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
