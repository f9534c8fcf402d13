#!/bin/sh
# Trains a model under each rung of issue 36's precision ladder, one run after another, and tabulates what each
# reached beside the fp32-master baseline: bytes per parameter, step speed, final accuracy / validation loss.
#
#   bench/precision_ladder.sh OUT_DIR mlp|cnn|gpt SEED... [-- RUNG...]
#
# RUNG: bench/ladder_flags.sh names them (baseline, state-bf16, state-8bit, nearest, stochastic, kahan,
# stochastic-8bit, kahan-8bit; all under --precision=bf16 with Adam; docs/precision_ladder.md).
# mlp: Fashion-MNIST, 5 epochs; cnn: Fashion-MNIST, 2 epochs; gpt: the char GPT, 2000 steps. Each run writes
# OUT_DIR/<model>_<rung>_s<seed>.{log,jsonl}; a run whose log ends in its result is not run again, so an interrupted
# sweep resumes. Then OUT_DIR/<model>.md gets one row per run and one per rung over its seeds (mean and range, median
# samples/s and its ratio to the baseline's). One thread per run (MANTISSA_THREADS to change it) so that two sweeps
# can share a 2-core machine; MANTISSA_TRAIN names the binary (copy it elsewhere first if you rebuild meanwhile);
# MANTISSA_FLAGS adds flags to every run (e.g. --lr=1e-4; give such a sweep its own OUT_DIR).
set -eu
. "$(dirname "$0")/ladder_flags.sh"
. "$(dirname "$0")/run_logs.sh"

if [ "$#" -lt 3 ]; then
  echo "usage: $0 OUT_DIR mlp|cnn|gpt SEED... [-- RUNG...]" >&2
  exit 2
fi
out=$1 model=$2
shift 2
seeds=""
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  seeds="$seeds $1"
  shift
done
[ "$#" -gt 0 ] && shift
rungs=${*:-baseline state-bf16 state-8bit nearest stochastic kahan stochastic-8bit kahan-8bit}
train=${MANTISSA_TRAIN:-build/train/mantissa-train}
threads=${MANTISSA_THREADS:-1}
extra=${MANTISSA_FLAGS:-}
mkdir -p "$out"

case "$model" in
  mlp) model_flags="--epochs=5" ;;
  cnn) model_flags="--model=cnn --epochs=2" ;;
  gpt) model_flags="--model=gpt --max_steps=2000 --sample_chars=0" ;;
  *) echo "precision_ladder: model must be mlp, cnn or gpt, got $model" >&2; exit 2 ;;
esac


for seed in $seeds; do
  for rung in $rungs; do
    flags=$(ladder_flags "$rung")
    name="$out/${model}_${rung}_s${seed}"
    if [ -s "$name.log" ] && grep -q "^done:" "$name.log"; then continue; fi
    echo "precision_ladder: $name" >&2
    # shellcheck disable=SC2086
    OMP_WAIT_POLICY=passive "$train" $model_flags --precision=bf16 $flags $extra --seed="$seed" --threads="$threads" \
      --progress=none --metrics="$name.jsonl" >"$name.log" 2>&1 || echo "precision_ladder: $name failed (see $name.log)" >&2
  done
done

table="$out/${model}.md"
{
  echo "| rung | seed | $( [ "$model" = gpt ] && echo "validation loss" || echo "test accuracy" ) | last eval loss | samples/s |"
  echo "|---|---:|---:|---:|---:|"
  for rung in $rungs; do
    for seed in $seeds; do
      log="$out/${model}_${rung}_s${seed}.log"
      [ -s "$log" ] || continue
      result=$(run_result "$log")
      speed=$(run_speed "$log")
      loss=$(grep '"event": "eval"' "$out/${model}_${rung}_s${seed}.jsonl" 2>/dev/null | tail -1 |
        sed -n 's/.*"loss": \([^,}]*\).*/\1/p')
      echo "| $rung | $seed | ${result:-failed} | ${loss:-} | ${speed:-} |"
    done
  done
  echo
  echo "| rung | bytes/param (Adam) | seeds | mean (min to max) | samples/s (median) | vs baseline |"
  echo "|---|---:|---:|---|---:|---:|"
  base_speed=""
  for rung in $rungs; do
    logs=""
    for seed in $seeds; do logs="$logs $out/${model}_${rung}_s${seed}.log"; done
    # shellcheck disable=SC2086
    row=$(seeds_row $logs)
    [ -n "$row" ] || continue
    # shellcheck disable=SC2086
    set -- $row
    [ "$rung" = baseline ] && base_speed=$5
    awk -v rung="$rung" -v bytes="$(ladder_bytes "$rung")" -v n="$1" -v mean="$2" -v lo="$3" -v hi="$4" -v speed="$5" \
      -v base="$base_speed" 'BEGIN {printf "| %s | %s | %d | %s (%s to %s) | %s | %s |\n", rung, bytes, n, mean, lo, hi,
        speed, base == "" ? "" : sprintf("%.2fx", speed / base)}'
  done
} >"$table"
echo "precision_ladder: $table" >&2
