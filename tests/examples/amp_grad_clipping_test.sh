#!/bin/sh
# ctest for examples/amp_grad_clipping.cc (unscale_, clip_grad_norm_, step, update) in one precision.
#   amp_grad_clipping_test.sh PATH/TO/example_amp_grad_clipping fp16|bf16
# Checks: the loss falls; some steps were clipped and no norm after clipping exceeds max_norm; the scaler did
# what the recipe implies (fp16: one update per step, scale = 2^16 / 2^skipped since 300 steps never reach
# the growth interval of 2000; bf16: the scaler is off).
set -u
program=$1 precision=$2
. "$(dirname "$0")/example_checks.sh"

steps=300 max_norm=2
run_example "$program" "$precision" "$steps" "$max_norm"

# loss: FIRST over the first 50 steps, LAST over the last 50
first=$(field loss: 2) last=$(field loss: 8)
check "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a && b < 0.85) }'

# clipped: C of N steps (max_norm M; largest norm after clipping X)
clipped=$(field clipped: 2) largest=$(field clipped: 12 | tr -d ')')
check "some steps were clipped ($clipped of $steps)" test "$clipped" -gt 0
# clip_grad_norm_ scales by max_norm / (norm + 1e-6), then each grad is rounded to f32: the norm after it
# may sit a few f32 ulps above max_norm * norm / (norm + 1e-6), never more than 1e-6 relative above max_norm.
check "the norm after clipping ($largest) is <= max_norm $max_norm" \
  awk -v x="$largest" -v m="$max_norm" 'BEGIN { exit !(x > 0 && x <= m * (1 + 1e-6)) }'

# scaler: on|off, U updates, S skipped, scale X
state=$(field scaler: 2 | tr -d ,) updates=$(field scaler: 3) skipped=$(field scaler: 5) scale=$(field scaler: 8)
if [ "$precision" = fp16 ]; then
  check "scaler on in fp16 ($state)" test "$state" = on
  check "one update per step ($updates of $steps)" test "$updates" -eq "$steps"
  check "few skipped steps ($skipped)" test "$skipped" -lt 10
  check "scale $scale = 65536 / 2^$skipped" awk -v s="$scale" -v k="$skipped" 'BEGIN { exit !(s == 65536 / 2 ^ k) }'
else
  check "scaler off in bf16 ($state, $updates updates, scale $scale)" \
    test "$state" = off -a "$updates" -eq 0 -a "$skipped" -eq 0 -a "$scale" = 1
fi
finish
