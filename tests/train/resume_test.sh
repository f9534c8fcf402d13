#!/bin/sh
# Issue 6's exact resume, end to end through mantissa-train: a run stopped at step STOP and resumed with
# --resume=latest logs the same loss, bit for bit, at every later step as the run that never stopped, and
# their final checkpoints' /model groups are identical (h5diff). For fp32, fp16 and bf16, SGD and Adam, in
# the middle of an epoch, for fp16 right after the loss scaler backed off, and for issue 36's precision ladder (bf16
# weights rounded stochastically or Kahan-compensated, 8-bit and bf16 state), whose final /optimizer groups (codes,
# absmax, compensation) must be identical too.
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
  if ! h5diff "$d/full/step_$total.h5" "$d/part/step_$total.h5" /optimizer/state /optimizer/state >"$d/h5diff.out" 2>&1; then
    echo "FAILED: $name: final optimizer state differs:"; head -5 "$d/h5diff.out"; failures=$((failures + 1)); return
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
# The precision ladder: the Philox draws (keyed by --seed, the parameter's name and its step), the compensation and
# the 8-bit codes with their absmax all carry over.
check ladder-stochastic-8bit 17 --precision=bf16 --optimizer=adamw --lr=0.01 --master_weights=none \
  --update_rounding=stochastic --optimizer_state=8bit
check ladder-kahan-bf16 17 --precision=bf16 --optimizer=sgd --lr=0.01 --master_weights=none --update_rounding=kahan \
  --optimizer_state=bf16
check ladder-masters-8bit 17 --precision=bf16 --optimizer=lion --lr=0.001 --optimizer_state=8bit
check ladder-fp16-scaled-8bit 17 --precision=fp16 --optimizer=adamw --lr=0.01 --optimizer_state=8bit
check ladder-fp8-clipped 17 --precision=fp8 --optimizer=adam --lr=0.01 --master_weights=none \
  --update_rounding=stochastic --optimizer_state=8bit --clip_grad_norm=0.5
# Resuming a ladder's checkpoint under another ladder is refused with a line naming both, and writes nothing.
d="$work/ladder-stochastic-8bit"
before=$(ls "$d/part")
# shellcheck disable=SC2086
if "$prog" $common --precision=bf16 --optimizer=adamw --lr=0.01 --max_steps=40 --checkpoint_dir="$d/part" \
  --resume=latest >"$d/other.out" 2>&1; then
  echo "FAILED: a stochastic/8bit checkpoint resumed under the default ladder"; failures=$((failures + 1))
elif ! grep -q "written under the precision ladder master_weights=none update_rounding=stochastic optimizer_state=8bit seed=1; the run's optimizer has master_weights=fp32 optimizer_state=fp32" "$d/other.out"; then
  echo "FAILED: the refusal does not name both ladders:"; tail -3 "$d/other.out"; failures=$((failures + 1))
elif [ "$(ls "$d/part")" != "$before" ]; then
  echo "FAILED: the refused resume changed the checkpoint folder"; failures=$((failures + 1))
else
  echo "ok: another ladder's checkpoint refused: $(tail -1 "$d/other.out" | cut -c1-100)..."
fi
grep -q '"skipped": true' "$work/fp16-after-backoff/full.jsonl" || { echo "FAILED: no skipped step in the backoff case"; failures=$((failures + 1)); }

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
