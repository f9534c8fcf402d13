#!/bin/sh
# Trains a model under every low-precision recipe, one run after another, and tabulates what each reached:
# bf16 (autocast, no FP8), FP8 per tensor (delayed, dynamic), and the block-scaled recipes (rowwise, blockwise,
# mxfp8, nvfp4, mxfp4; issue 35), each with the FP8 GEMMs' sums in full f32 (ACC=f32) or as Hopper's tensor
# core makes them (ACC=hopper; 32- and 16-wide blocks have no Hopper model and are skipped).
#
#   bench/fp8_recipes.sh OUT_DIR mlp|gpt ACC SEED... [-- RECIPE...]
#
# mlp: the Fashion-MNIST MLP for 5 epochs; gpt: the char GPT for 2000 steps. Each run writes OUT_DIR/<model>_
# <recipe>_<acc>_s<seed>.{log,jsonl} (its output and its --metrics); a run whose log already ends in its result is
# not run again, so an interrupted sweep resumes. Then OUT_DIR/<model>_<acc>.md gets one row per run: the final
# accuracy (mlp) or validation loss (gpt), the last evaluation loss, samples/s, and the FP8 casts' saturated /
# flushed-to-zero counts per role as mantissa-train printed them. Runs use one thread (MANTISSA_THREADS to
# change it) so that two sweeps can share a 2-core machine; MANTISSA_TRAIN names the binary
# (build/train/mantissa-train by default: copy it elsewhere first if you rebuild while a sweep runs).
set -eu
. "$(dirname "$0")/run_logs.sh"

if [ "$#" -lt 4 ]; then
  echo "usage: $0 OUT_DIR mlp|gpt f32|hopper|hopper-fast SEED... [-- RECIPE...]" >&2
  exit 2
fi
out=$1 model=$2 acc=$3
shift 3
seeds=""
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  seeds="$seeds $1"
  shift
done
[ "$#" -gt 0 ] && shift
recipes=${*:-bf16 delayed dynamic rowwise blockwise mxfp8 nvfp4 mxfp4}
train=${MANTISSA_TRAIN:-build/train/mantissa-train}
threads=${MANTISSA_THREADS:-1}
mkdir -p "$out"

case "$model" in
  mlp) model_flags="--epochs=5" ;;
  gpt) model_flags="--model=gpt --max_steps=2000 --sample_chars=0" ;;
  *) echo "fp8_recipes: model must be mlp or gpt, got $model" >&2; exit 2 ;;
esac

for seed in $seeds; do
  for recipe in $recipes; do
    case "$recipe" in
      bf16) flags="--precision=bf16" ;;
      mxfp8 | nvfp4 | mxfp4)
        [ "$acc" = f32 ] || continue  # no Hopper model for 32- and 16-wide blocks (mantissa-train refuses it)
        flags="--precision=fp8 --fp8_recipe=$recipe --fp8_accumulator=$acc" ;;
      *) flags="--precision=fp8 --fp8_recipe=$recipe --fp8_accumulator=$acc" ;;
    esac
    [ "$recipe" = bf16 ] && [ "$acc" != f32 ] && continue
    name="$out/${model}_${recipe}_${acc}_s${seed}"
    if [ -s "$name.log" ] && grep -q "^done:" "$name.log"; then continue; fi
    echo "fp8_recipes: $name" >&2
    # shellcheck disable=SC2086
    OMP_WAIT_POLICY=passive "$train" $model_flags $flags --seed="$seed" --threads="$threads" --progress=none \
      --metrics="$name.jsonl" >"$name.log" 2>&1 || echo "fp8_recipes: $name failed (see $name.log)" >&2
  done
done

table="$out/${model}_${acc}.md"
{
  echo "| recipe | seed | $( [ "$model" = mlp ] && echo "test accuracy" || echo "validation loss" ) | last eval loss | samples/s | saturated / flushed to zero per role |"
  echo "|---|---:|---:|---:|---:|---|"
  for recipe in $recipes; do
    for seed in $seeds; do
      log="$out/${model}_${recipe}_${acc}_s${seed}.log"
      [ -s "$log" ] || continue
      result=$(run_result "$log")
      speed=$(run_speed "$log")
      loss=$(grep '"event": "eval"' "$out/${model}_${recipe}_${acc}_s${seed}.jsonl" 2>/dev/null | tail -1 |
        sed -n 's/.*"loss": \([^,}]*\).*/\1/p')
      counts=$(sed -n 's/^fp8 ([^)]*): values saturated \/ flushed to zero in [0-9]* FP8 linears: //p' "$log" | head -1)
      echo "| $recipe | $seed | ${result:-failed} | ${loss:-} | ${speed:-} | ${counts:-} |"
    done
  done
  # Per recipe over its seeds: the mean result and its range, the median samples/s and its ratio to bf16's.
  echo
  echo "| recipe | seeds | mean (min to max) | samples/s (median) | vs bf16 |"
  echo "|---|---:|---|---:|---:|"
  bf16_speed=""
  for recipe in $recipes; do
    logs=""
    for seed in $seeds; do logs="$logs $out/${model}_${recipe}_${acc}_s${seed}.log"; done
    # shellcheck disable=SC2086
    row=$(seeds_row $logs)
    [ -n "$row" ] || continue
    # shellcheck disable=SC2086
    set -- $row
    [ "$recipe" = bf16 ] && bf16_speed=$5
    awk -v recipe="$recipe" -v n="$1" -v mean="$2" -v lo="$3" -v hi="$4" -v speed="$5" -v base="$bf16_speed" \
      'BEGIN {printf "| %s | %d | %s (%s to %s) | %s | %s |\n", recipe, n, mean, lo, hi, speed,
        base == "" ? "" : sprintf("%.2fx", speed / base)}'
  done
} >"$table"
echo "fp8_recipes: $table" >&2
