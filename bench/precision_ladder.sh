#!/bin/sh
# Trains a model under each rung of issue 36's precision ladder, one run after another, and tabulates what each
# reached beside the fp32-master baseline: bytes per parameter, step speed, final accuracy / validation loss.
#
#   bench/precision_ladder.sh OUT_DIR mlp|cnn|gpt SEED... [-- RUNG...]
#
# Rungs (all under --precision=bf16, Adam; mantissa-train's flags, docs/precision_ladder.md):
#   baseline      fp32 masters, fp32 moments (the 2018 recipe)
#   state-bf16    fp32 masters, bf16 moments          state-8bit   fp32 masters, 8-bit block-wise moments
#   nearest       bf16 weights, round to nearest (the naive rung), fp32 moments
#   stochastic    bf16 weights, stochastic rounding, fp32 moments
#   kahan         bf16 weights, Kahan compensation, fp32 moments
#   stochastic-8bit / kahan-8bit   bf16 weights and 8-bit moments: the smallest rungs
# mlp: Fashion-MNIST, 5 epochs; cnn: Fashion-MNIST, 2 epochs; gpt: the char GPT, 2000 steps. Each run writes
# OUT_DIR/<model>_<rung>_s<seed>.{log,jsonl}; a run whose log ends in its result is not run again, so an interrupted
# sweep resumes. Then OUT_DIR/<model>.md gets one row per run and one per rung over its seeds (mean and range, median
# samples/s and its ratio to the baseline's). One thread per run (MANTISSA_THREADS to change it) so that two sweeps
# can share a 2-core machine; MANTISSA_TRAIN names the binary (copy it elsewhere first if you rebuild meanwhile).
set -eu

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
mkdir -p "$out"

case "$model" in
  mlp) model_flags="--epochs=5" ;;
  cnn) model_flags="--model=cnn --epochs=2" ;;
  gpt) model_flags="--model=gpt --max_steps=2000 --sample_chars=0" ;;
  *) echo "precision_ladder: model must be mlp, cnn or gpt, got $model" >&2; exit 2 ;;
esac

flags_of() {
  case "$1" in
    baseline) echo "" ;;
    state-bf16) echo "--optimizer_state=bf16" ;;
    state-8bit) echo "--optimizer_state=8bit" ;;
    nearest | stochastic | kahan) echo "--master_weights=none --update_rounding=$1" ;;
    stochastic-8bit | kahan-8bit) echo "--master_weights=none --update_rounding=${1%-8bit} --optimizer_state=8bit" ;;
    *) echo "precision_ladder: unknown rung $1" >&2; exit 2 ;;
  esac
}

for seed in $seeds; do
  for rung in $rungs; do
    flags=$(flags_of "$rung")
    name="$out/${model}_${rung}_s${seed}"
    if [ -s "$name.log" ] && grep -q "^done:" "$name.log"; then continue; fi
    echo "precision_ladder: $name" >&2
    # shellcheck disable=SC2086
    OMP_WAIT_POLICY=passive "$train" $model_flags --precision=bf16 $flags --seed="$seed" --threads="$threads" \
      --progress=none --metrics="$name.jsonl" >"$name.log" 2>&1 || echo "precision_ladder: $name failed (see $name.log)" >&2
  done
done

# Bytes per parameter of Adam under each rung, with the bf16 working copy the Trainer keeps for fp32 masters.
bytes_of() {
  case "$1" in
    baseline) echo "18" ;;          # 4 master + 2 copy + 4 grad + 8 moments
    state-bf16) echo "14" ;;        # 4 + 2 + 4 + 4
    state-8bit) echo "12.004" ;;    # 4 + 2 + 4 + 2 x (1 + 4/2048)
    nearest | stochastic) echo "12" ;;  # 2 weights + 2 grad + 8 moments
    kahan) echo "14" ;;             # + 2 compensation
    stochastic-8bit) echo "6.004" ;;  # 2 + 2 + 2 x (1 + 4/2048)
    kahan-8bit) echo "8.004" ;;
  esac
}

table="$out/${model}.md"
{
  echo "| rung | seed | $( [ "$model" = gpt ] && echo "validation loss" || echo "test accuracy" ) | last eval loss | samples/s |"
  echo "|---|---:|---:|---:|---:|"
  for rung in $rungs; do
    for seed in $seeds; do
      log="$out/${model}_${rung}_s${seed}.log"
      [ -s "$log" ] || continue
      result=$(sed -n 's/^test accuracy: //p; s/^validation loss: //p' "$log" | tail -1)
      speed=$(sed -n 's/^done: .* \([0-9.]*\) samples\/s.*/\1/p' "$log" | tail -1)
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
    results="" speeds=""
    for seed in $seeds; do
      log="$out/${model}_${rung}_s${seed}.log"
      [ -s "$log" ] || continue
      r=$(sed -n 's/^test accuracy: \([0-9.]*\)%.*/\1/p; s/^validation loss: //p' "$log" | tail -1)
      v=$(sed -n 's/^done: .* \([0-9.]*\) samples\/s.*/\1/p' "$log" | tail -1)
      [ -n "$r" ] && results="$results $r"
      [ -n "$v" ] && speeds="$speeds $v"
    done
    [ -n "$results" ] || continue
    speed=$(echo "$speeds" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
    [ "$rung" = baseline ] && base_speed=$speed
    echo "$results" | tr ' ' '\n' | grep . | awk -v rung="$rung" -v bytes="$(bytes_of "$rung")" -v speed="$speed" \
      -v base="$base_speed" '
      {s += $1; n++; if (n == 1 || $1 < lo) lo = $1; if (n == 1 || $1 > hi) hi = $1}
      END {printf "| %s | %s | %d | %.4g (%.4g to %.4g) | %s | %s |\n", rung, bytes, n, s / n, lo, hi, speed,
           base == "" ? "" : sprintf("%.2fx", speed / base)}'
  done
} >"$table"
echo "precision_ladder: $table" >&2
