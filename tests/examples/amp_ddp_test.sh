#!/bin/sh
# ctest for examples/amp_ddp.cc (DDP and the GradScaler in one's own loop).
#   amp_ddp_test.sh PATH/TO/example_amp_ddp fp16|bf16 [MPIRUN]
# Without MPIRUN: one process (a world of one). With it: 2 ranks under mpirun, batch 64 each, which must
# end with identical weights; their loss must follow one process with batch 128 (the same examples per step).
# Both: the loss falls; fp16: one scaler update per step and a scale of 2^16 halved once per skipped step
# (200 steps never reach the growth interval of 2000); bf16: the scaler is off.
set -u
program=$1 precision=$2 mpirun=${3:-}
. "$(dirname "$0")/example_checks.sh"

steps=200
if [ -n "$mpirun" ]; then
  ranks=2
  # --allow-run-as-root: CI containers run as root; --oversubscribe: more ranks than cores is fine here.
  run_example "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$program" "$precision" "$steps" 64
else
  ranks=1
  run_example "$program" "$precision" "$steps" 128
fi
check "$ranks rank(s) ran together ($(field ranks: 2 | tr -d ,))" test "$(field ranks: 2 | tr -d ,)" = "$ranks"

# loss: FIRST over the first 50 steps, LAST over the last 50 (means over the ranks)
first=$(field loss: 2) last=$(field loss: 8)
# From ln(10) = 2.30 at the start; 0.46 measured over the last 50 of 200 steps.
check "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.7 * a && b < 0.6) }'
# weights: largest difference from rank 0 D
check "identical weights on every rank (largest difference $(field weights: 6))" test "$(field weights: 6)" = 0

# scaler: on|off, U updates, S skipped, scale X
state=$(field scaler: 2 | tr -d ,) updates=$(field scaler: 3) skipped=$(field scaler: 5) scale=$(field scaler: 8)
if [ "$precision" = fp16 ]; then
  check "scaler on in fp16, one update per step ($state, $updates of $steps)" test "$state" = on -a "$updates" -eq "$steps"
  check "scale $scale = 65536 / 2^$skipped (few skipped)" \
    awk -v s="$scale" -v k="$skipped" 'BEGIN { exit !(k < 10 && s == 65536 / 2 ^ k) }'
else
  check "scaler off in bf16 ($state, $updates updates, scale $scale)" \
    test "$state" = off -a "$updates" -eq 0 -a "$skipped" -eq 0 -a "$scale" = 1
fi

if [ -n "$mpirun" ]; then
  # 2 ranks x 64 see the examples of one process's batch of 128 (the sharded order interleaves them); the
  # runs differ only by rounding: measured 1e-3 (fp16) and 4e-3 (bf16) relative on the last 50 steps' loss.
  run_example "$program" "$precision" "$steps" 128
  alone=$(field loss: 8)
  check "2 ranks follow one process of twice the batch ($last, $alone; relative tolerance 2e-2)" \
    awk -v a="$last" -v b="$alone" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 2e-2 * b) }'
fi
finish
