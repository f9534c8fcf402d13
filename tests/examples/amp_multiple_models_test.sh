#!/bin/sh
# ctest for examples/amp_multiple_models.cc (two models, two losses, two optimizers, one scaler).
#   amp_multiple_models_test.sh PATH/TO/example_amp_multiple_models fp16|bf16
# Checks: both losses fall; fp16: update() ran once per iteration (the scaler counted as many updates as
# iterations), the scale is 2^16 halved once per skipped iteration (300 iterations never reach the growth
# interval of 2000), and each optimizer applied every iteration but those whose inf check failed;
# bf16: the scaler is off and both optimizers stepped every iteration.
set -u
program=$1 precision=$2
. "$(dirname "$0")/example_checks.sh"

steps=300
run_example "$program" "$precision" "$steps"

# NAME: FIRST over the first 50 steps, LAST over the last 50
for loss in classification reconstruction; do
  first=$(field $loss: 2) last=$(field $loss: 8)
  check "the $loss loss falls ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.75 * a) }'
done
# Measured after 300 steps: 0.53-0.55 and 0.26.
check "classification below 0.7" awk -v l="$(field classification: 8)" 'BEGIN { exit !(l < 0.7) }'
check "reconstruction below 0.35" awk -v l="$(field reconstruction: 8)" 'BEGIN { exit !(l < 0.35) }'

# steps: N iterations, A0 applied by opt0, A1 by opt1 / scaler: on|off, U updates, S skipped, scale X
iterations=$(field steps: 2) applied0=$(field steps: 4) applied1=$(field steps: 8)
state=$(field scaler: 2 | tr -d ,) updates=$(field scaler: 3) skipped=$(field scaler: 5) scale=$(field scaler: 8)
check "$steps iterations ($iterations)" test "$iterations" -eq "$steps"
if [ "$precision" = fp16 ]; then
  check "scaler on in fp16 ($state)" test "$state" = on
  check "one update per iteration ($updates of $steps)" test "$updates" -eq "$steps"
  check "few skipped iterations ($skipped)" test "$skipped" -lt 10
  check "scale $scale = 65536 / 2^$skipped" awk -v s="$scale" -v k="$skipped" 'BEGIN { exit !(s == 65536 / 2 ^ k) }'
  for a in "$applied0" "$applied1"; do
    check "an optimizer applied $a steps, from $((steps - skipped)) to $steps" \
      test "$a" -ge $((steps - skipped)) -a "$a" -le "$steps"
  done
else
  check "scaler off in bf16 ($state, $updates updates, scale $scale)" \
    test "$state" = off -a "$updates" -eq 0 -a "$skipped" -eq 0 -a "$scale" = 1
  check "both optimizers stepped every iteration ($applied0, $applied1)" \
    test "$applied0" -eq "$steps" -a "$applied1" -eq "$steps"
fi
finish
