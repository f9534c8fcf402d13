#!/bin/sh
# The CPU cost of each FP8/FP4 recipe, or precision-ladder rung, against bf16, interleaved (issues 35, 36): every
# recipe in turn, ROUNDS times,
# mantissa-train's MLP for STEPS steps on one thread; per run its samples/s, then per recipe the median of its
# ratio to bf16 in the same round, and the range. A shared, noisy machine moves all runs of a round together,
# so the ratio within a round is what is compared.
#   bench/fp8_recipe_cost.sh [ROUNDS [STEPS]] [-- RECIPE...]
# RECIPE: bf16, a --fp8_recipe head word (delayed, dynamic, rowwise, blockwise, mxfp8, nvfp4, mxfp4), or one of
# those with :hopper for the H200's tensor-core sums (--fp8_accumulator=hopper; per-tensor, rowwise and blockwise
# only), or ladder:RUNG for a rung of bench/ladder_flags.sh (bf16 autocast; ladder:baseline is bf16 itself).
# MANTISSA_TRAIN names the binary (default build/train/mantissa-train). Prints a markdown table.
set -eu
. "$(dirname "$0")/ladder_flags.sh"
rounds=3 steps=300
if [ "$#" -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
if [ "$#" -gt 0 ] && [ "$1" != "--" ]; then steps=$1; shift; fi
if [ "$#" -gt 0 ] && [ "$1" = "--" ]; then shift; fi
recipes=${*:-bf16 delayed dynamic rowwise blockwise mxfp8 nvfp4 mxfp4 delayed:hopper dynamic:hopper rowwise:hopper blockwise:hopper}
train=${MANTISSA_TRAIN:-build/train/mantissa-train}
[ -x "$train" ] || { echo "fp8_recipe_cost: no $train (build it, or set MANTISSA_TRAIN)" >&2; exit 2; }
case " $recipes " in *" bf16 "*) ;; *) echo "fp8_recipe_cost: the recipes must include bf16 (the ratios' base)" >&2; exit 2 ;; esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
round=1
while [ "$round" -le "$rounds" ]; do
  for r in $recipes; do
    case "$r" in
      bf16) flags="--precision=bf16" ;;
      *:hopper) flags="--precision=fp8 --fp8_recipe=${r%:hopper} --fp8_accumulator=hopper" ;;
      ladder:*) flags="--precision=bf16 $(ladder_flags "${r#ladder:}")" ;;
      *) flags="--precision=fp8 --fp8_recipe=$r" ;;
    esac
    # shellcheck disable=SC2086
    speed=$(OMP_WAIT_POLICY=passive "$train" $flags --max_steps="$steps" --threads=1 --eval_batches=1 \
      --progress=none --seed=1 2>&1 | sed -n 's/^done: .* \([0-9.]*\) samples\/s.*/\1/p')
    [ -n "$speed" ] || { echo "fp8_recipe_cost: $r failed" >&2; exit 1; }
    echo "$round $r $speed" >>"$out"
  done
  round=$((round + 1))
done
awk -v rounds="$rounds" -v order="$recipes" '
  { s[$2, $1] = $3; if ($2 == "bf16") base[$1] = $3 }
  END {
    n = split(order, names, " ")
    printf "| recipe |"; for (k = 1; k <= rounds; ++k) printf " round %d |", k; print " vs bf16: median (range) |"
    printf "|---|"; for (k = 1; k <= rounds; ++k) printf "---:|"; print "---:|"
    for (i = 1; i <= n; ++i) {
      r = names[i]; printf "| %s |", r
      m = 0
      for (k = 1; k <= rounds; ++k) { printf " %s |", s[r, k]; ratio[++m] = s[r, k] / base[k] }
      for (a = 1; a <= m; ++a) for (b = a + 1; b <= m; ++b) if (ratio[b] < ratio[a]) { t = ratio[a]; ratio[a] = ratio[b]; ratio[b] = t }
      med = (m % 2) ? ratio[(m + 1) / 2] : (ratio[m / 2] + ratio[m / 2 + 1]) / 2
      if (r == "bf16") print " 1 |"; else printf " %.2fx (%.2f to %.2f) |\n", med, ratio[1], ratio[m]
    }
  }' "$out"
