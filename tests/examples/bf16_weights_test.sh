#!/bin/sh
# ctest for examples/bf16_weights.cc (bf16 weights without fp32 masters, AdamW under a precision-ladder rung, a
# checkpoint halfway and a resume from it) under one rung.
#   bf16_weights_test.sh PATH/TO/example_bf16_weights ROUNDING-STATE BYTES
# e.g. stochastic-8bit 6.004. Checks: the bytes per parameter the rung promises; the loss falls and the MLP reaches
# the accuracy fp32 masters reach in as many steps (85% after 600); the resumed run ends bit for bit where the
# uninterrupted one does.
set -u
program=$1 rung=$2 bytes=$3
. "$(dirname "$0")/example_checks.sh"

rounding=${rung%-*} state=${rung#*-}
run_example "$program" "$rounding" "$state" 600 "$work/checkpoint.h5"

check "the ladder is $rung ($(field ladder: 2) $(field ladder: 3) $(field ladder: 4))" \
  test "$(field ladder: 2) $(field ladder: 3) $(field ladder: 4)" = \
  "master_weights=none update_rounding=$rounding optimizer_state=$state"
check "$bytes bytes per parameter ($(field bytes: 2))" test "$(field bytes: 2)" = "$bytes"

# loss: FIRST over the first 50 steps, LAST over the last 50
first=$(field loss: 2) last=$(field loss: 8)
check "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.6 * a && b < 0.5) }'
accuracy=$(field accuracy: 2 | tr -d %)
check "test accuracy $accuracy% >= 82%" awk -v a="$accuracy" 'BEGIN { exit !(a >= 82) }'
check "the resumed run equals the uninterrupted one bit for bit" grep -q "^resume: bit-for-bit" "$out"
finish
