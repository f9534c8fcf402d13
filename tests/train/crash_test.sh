#!/bin/bash
# Issue 6: a checkpoint write killed at any moment never breaks `latest`. A child trains a small model and
# checkpoints after every step; it is killed with SIGKILL after a random delay (TRIALS times, default 20);
# each time `--resume=latest` must load a complete checkpoint and train one more step.
#   crash_test.sh PATH/TO/mantissa-train [TRIALS]
set -u
prog=$1 trials=${2:-20}
work=$(mktemp -d "${TMPDIR:-/tmp}/crash_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
common=(--data=synthetic --mlp_hidden=256,256 --batch_size=64 --eval_every=100000 --eval_batches=1 --progress=none
        --threads=1 --checkpoint_dir="$work/ckpt" --checkpoint_every=1 --keep_checkpoints=2)
RANDOM=7  # a fixed sequence of delays
# The first checkpoint exists before the kills start, so that `latest` always has something to name.
"$prog" "${common[@]}" --max_steps=1 >"$work/first.out" 2>&1 || { echo "FAILED: first run"; cat "$work/first.out"; exit 1; }
killed_while_writing=0
for trial in $(seq 1 "$trials"); do
  before=$(cat "$work/ckpt/latest")
  "$prog" "${common[@]}" --resume=latest --max_steps=1000000 >"$work/run.out" 2>&1 &
  pid=$!
  # Past start-up (making the synthetic data takes a moment): wait for the child's first checkpoint, then
  # kill it 0 to 0.3 s later, inside the write-every-step loop.
  for _ in $(seq 1 600); do
    [ "$(cat "$work/ckpt/latest" 2>/dev/null)" != "$before" ] && break
    sleep 0.05
  done
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.3 * r / 32767 }')"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  ls -A "$work/ckpt" | grep -q '\.tmp' && killed_while_writing=$((killed_while_writing + 1))
  latest=$(cat "$work/ckpt/latest" 2>/dev/null)
  step=$(echo "$latest" | sed -n 's/^step_\([0-9]*\)\.h5$/\1/p')
  if [ -z "$step" ]; then
    echo "FAILED: trial $trial: latest names '$latest'"; failures=$((failures + 1)); continue
  fi
  if "$prog" "${common[@]}" --resume=latest --max_steps=$((step + 1)) >"$work/check.out" 2>&1 &&
      grep -q "resumed at step $step" "$work/check.out"; then
    echo "ok: trial $trial: latest = $latest loads and trains on"
  else
    echo "FAILED: trial $trial: --resume=latest ($latest) did not load:"; cat "$work/check.out"
    failures=$((failures + 1))
  fi
done
echo "kills that left a temporary file (killed inside a write): $killed_while_writing of $trials"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
