#!/bin/sh
# `make demo`'s claim, checked on the demo itself: mantissa-train with its defaults and nothing else (MLP
# 784-1024-1024-10, Fashion-MNIST, fp16 autocast with dynamic loss scaling, Adam 1e-3, batch 128, 5 epochs,
# seed 1), reaching a test accuracy inside the band below, after all 2,345 steps.
#
# The band: seeds 1-6 of this configuration gave 88.66, 87.53, 88.10, 88.10, 87.34 and 88.01% (mean 87.96,
# standard deviation 0.47 point; the README's 88.66% is seed 1, the top of the range). The band is that
# range widened to [87.0%, 89.0%]: on another CPU the GEMM library may take another code path (AVX-512 or
# not), whose different roundings grow over 2,345 steps into what is, in effect, another seed; a change
# that moves the demo outside what the seeds span is one to look at, not to absorb.
#   demo_accuracy_test.sh PATH/TO/mantissa-train
set -u
prog=$1
low=0.870 high=0.890
work=$(mktemp -d "${TMPDIR:-/tmp}/demo_accuracy_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! "$prog" --progress=none --metrics="$work/demo.jsonl" >"$work/demo.out" 2>&1; then
  echo "FAILED: mantissa-train with its defaults exited non-zero"; cat "$work/demo.out"; exit 1
fi
summary=$(grep '"event": "summary"' "$work/demo.jsonl")
field() { echo "$summary" | sed -n "s/.*\"$1\": \([-0-9.e+]*\).*/\1/p"; }
acc=$(field test_accuracy) steps=$(field steps)
echo "demo: test accuracy $acc after $steps steps ($(field wall_s) s), band [$low, $high]"
[ "$steps" = 2345 ] || { echo "FAILED: the demo ran $steps steps, not 5 epochs of 469"; exit 1; }
awk -v a="$acc" -v lo="$low" -v hi="$high" 'BEGIN { exit !(a >= lo && a <= hi) }' ||
  { echo "FAILED: test accuracy $acc is outside [$low, $high]"; exit 1; }
