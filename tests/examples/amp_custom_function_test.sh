#!/bin/sh
# ctest for examples/amp_custom_function.cc (custom Functions under autocast) in one precision.
#   amp_custom_function_test.sh PATH/TO/example_amp_custom_function fp16|bf16
# Checks: the registered op has its fp32 category on both devices; custom_bwd ran MyLinear's backward in the
# autocast dtype and the op's category gave the loss fp32 logits; the first step's gradients equal the
# built-in twin's to the 16-bit rounding (measured 8e-4 in fp16, 3e-3 in bf16; a wrong backward is off by
# O(1)); the loss falls and ends near the twin's (measured within 0.043 at 200, 300 and 400 steps); the
# scaler did what fp16 and bf16 imply.
set -u
program=$1 precision=$2
. "$(dirname "$0")/example_checks.sh"

steps=300
run_example "$program" "$precision" "$steps"

# policy: smoothed_cross_entropy is CPU under CPU autocast, CUDA under CUDA autocast (registered: yes)
check "the registered op is fp32 on the CPU and on CUDA" \
  test "$(field policy: 4) $(field policy: 8) $(field policy: 13)" = "fp32 fp32 yes)"

# dtypes: MyLinear backward D, SmoothedCrossEntropy forward D
low=$(if [ "$precision" = fp16 ]; then echo f16; else echo bf16; fi)
check "MyLinear's backward ran in $low ($(field dtypes: 4 | tr -d ,))" test "$(field dtypes: 4 | tr -d ,)" = "$low"
check "the loss got f32 logits ($(field dtypes: 7))" test "$(field dtypes: 7)" = f32

# loss: FIRST over the first 50 steps, LAST over the last 50; builtin: B over the last 50 steps; step-0 ... by D
first=$(field loss: 2) last=$(field loss: 8) builtin=$(field builtin: 2) diff=$(field builtin: 12)
check "the loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.9 * a && b < 1.15) }'
check "the built-in twin ends near it ($last vs $builtin)" \
  awk -v a="$last" -v b="$builtin" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.1) }'
check "step-0 gradients agree with the twin's ($diff of the largest)" awk -v d="$diff" 'BEGIN { exit !(d < 0.01) }'

# scaler: on|off, U updates, S skipped, scale X
state=$(field scaler: 2 | tr -d ,) updates=$(field scaler: 3) skipped=$(field scaler: 5)
if [ "$precision" = fp16 ]; then
  check "scaler on, one update per step ($state, $updates of $steps)" test "$state" = on -a "$updates" -eq "$steps"
  check "few skipped steps ($skipped)" test "$skipped" -lt 10
else
  check "scaler off in bf16 ($state, $updates updates)" test "$state" = off -a "$updates" -eq 0
fi
finish
