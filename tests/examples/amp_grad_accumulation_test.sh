#!/bin/sh
# ctest for examples/amp_grad_accumulation.cc (4 micro-batches of 32 per step against batches of 128).
#   amp_grad_accumulation_test.sh PATH/TO/example_amp_grad_accumulation fp32|fp16|bf16
# Checks: both runs apply and skip the same steps, one scaler update per effective batch in fp16; the loss
# falls; the two runs end with the same weights and loss: in fp32 up to float summation order, in fp16/bf16
# within what rounding each micro-batch's 16-bit grads separately allows. A wrong accumulation (no division
# by the micro-batch count, a step or update per micro-batch) ends with the weights apart by more than
# training moved them (ratio about 1.6, measured).
set -u
program=$1 precision=$2
. "$(dirname "$0")/example_checks.sh"

steps=100
run_example "$program" "$precision" "$steps" 4

# NAME: A steps applied, S skipped, U scaler updates, scale X, last loss L
for run in accumulated one_batch; do
  eval "${run}_applied=\$(field $run: 2) ${run}_skipped=\$(field $run: 5) ${run}_updates=\$(field $run: 7)"
  eval "${run}_scale=\$(field $run: 11 | tr -d ,) ${run}_loss=\$(field $run: 14)"
done
check "the same steps applied ($accumulated_applied, $one_batch_applied) and skipped ($accumulated_skipped, $one_batch_skipped)" \
  test "$accumulated_applied" -eq "$one_batch_applied" -a "$accumulated_skipped" -eq "$one_batch_skipped" \
  -a $((accumulated_applied + accumulated_skipped)) -eq "$steps"
check "the same scale ($accumulated_scale, $one_batch_scale)" test "$accumulated_scale" = "$one_batch_scale"
if [ "$precision" = fp16 ]; then
  check "one scaler update per effective batch ($accumulated_updates, $one_batch_updates of $steps)" \
    test "$accumulated_updates" -eq "$steps" -a "$one_batch_updates" -eq "$steps"
else
  check "no scaler in $precision ($accumulated_updates updates)" test "$accumulated_updates" -eq 0
fi
# From ln(10) = 2.30 at the start; 0.51 measured after 100 steps.
check "the loss falls ($accumulated_loss)" awk -v l="$accumulated_loss" 'BEGIN { exit !(l < 0.7) }'

# Tolerances: fp32 measured 4e-7 (weights) and 0 (loss); fp16 0.02 and 4e-4, bf16 0.04 and 5e-4.
if [ "$precision" = fp32 ]; then weights_tol=1e-4 loss_tol=1e-5; else weights_tol=0.2 loss_tol=5e-3; fi
ratio=$(field weights: 7)
check "the weights agree (apart / moved $ratio <= $weights_tol)" \
  awk -v r="$ratio" -v t="$weights_tol" 'BEGIN { exit !(r <= t) }'
check "the losses agree ($accumulated_loss, $one_batch_loss; relative tolerance $loss_tol)" \
  awk -v a="$accumulated_loss" -v b="$one_batch_loss" -v t="$loss_tol" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t * b) }'
finish
