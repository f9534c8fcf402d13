#!/usr/bin/env bash
# Runs the MLP and the CNN training steps (forward, cross-entropy, backward, Adam) in mantissa and in
# PyTorch (2.x from PyPI, in the virtual environment scripts/install-deps.sh --bench makes) on the same shapes, batch, precision and thread count, one after the
# other in one run, and prints ms per step, samples/s and the ratio (PyTorch time / mantissa time: above
# 1 means mantissa is faster). bf16 is autocast over fp32 masters in both; mantissa's
# bf16_autocast_working_copies keeps persistent bf16 weight copies (optimizer.enable_working_copies).
# Then the same steps through the mantissa-train program (--data=synthetic: random inputs of the model's
# shape, no I/O; the Trainer's whole step including the loader, the grad norm and the metrics), whose
# samples/s is the median over the steps after warm-up, against the same PyTorch figures.
#   bench/compare_pytorch.sh [build-dir]      (make bench builds the programs and installs torch)
#   MODELS="mlp cnn" THREADS=2 REPS=5 STEPS=50 are the defaults.
set -euo pipefail
build=${1:-build}
threads=${THREADS:-2}
reps=${REPS:-5}
steps=${STEPS:-50}
models=${MODELS:-mlp cnn}
here=$(cd "$(dirname "$0")" && pwd)
# PyTorch's interpreter: $PYTHON, or the --bench virtual environment.
python=${PYTHON:-${MANTISSA_BENCH_VENV:-$here/../build/bench-venv}/bin/python}
[ -x "$python" ] || { echo "compare_pytorch.sh: no $python; run scripts/install-deps.sh --bench (or make bench)" >&2; exit 1; }
export OMP_NUM_THREADS=$threads
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; $(date -u '+%F %H:%M') UTC; load: $(cut -d' ' -f1-3 /proc/loadavg); torch $("$python" -c 'import torch; print(torch.__version__)')"
printf '%-5s %-30s %9s %9s %9s %9s %7s\n' model precision mt_ms pt_ms mt_smp/s pt_smp/s ratio
for model in $models; do
  case $model in
    mlp) bench=mlp_step_bench; bm=BM_MlpStep; batch=256 ;;
    cnn) bench=cnn_step_bench; bm=BM_CnnStep; batch=128 ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  mt=$("$build/bench/$bench" --benchmark_format=csv --benchmark_repetitions="$reps" \
        --benchmark_filter="^$bm/" --benchmark_report_aggregates_only=true 2>/dev/null | grep '_median')
  pt=$("$python" "$here/pytorch/${model}_step.py" --threads "$threads" --steps "$steps" --warmup 5 2>/dev/null)
  for prec in f32 bf16_autocast bf16_autocast_working_copies; do
    m=$(echo "$mt" | grep "\"$bm/$prec/" | cut -d, -f3)   # real_time in ms
    pprec=$prec; [ "$prec" = bf16_autocast_working_copies ] && pprec=bf16_autocast
    p=$(echo "$pt" | awk -v k="pytorch_${model}_step_$pprec" '$1 == k { print $2 * 1000 }')
    awk -v mo="$model" -v n="$prec" -v m="$m" -v p="$p" -v b="$batch" 'BEGIN {
      printf "%-5s %-30s %9.2f %9.2f %9.0f %9.0f %7.2f\n", mo, n, m, p, b * 1000 / m, b * 1000 / p, p / m }'
  done
  for prec in f32 bf16; do
    flag=$prec; [ "$prec" = f32 ] && flag=fp32
    metrics=$(mktemp)
    "$build/train/mantissa-train" --model="$model" --data=synthetic --precision="$flag" --batch_size="$batch" \
      --optimizer=adam --max_steps=$((steps + 10)) --eval_batches=1 --threads="$threads" --progress=none \
      --metrics="$metrics" >/dev/null
    m=$(sed -n 's/.*"event": "summary".*"samples_per_s": \([0-9.e+]*\).*/\1/p' "$metrics")
    rm -f "$metrics"
    pprec=bf16_autocast; [ "$prec" = f32 ] && pprec=f32
    p=$(echo "$pt" | awk -v k="pytorch_${model}_step_$pprec" '$1 == k { print $2 * 1000 }')
    awk -v mo="$model" -v n="mantissa-train $flag" -v s="$m" -v p="$p" -v b="$batch" 'BEGIN {
      printf "%-5s %-30s %9.2f %9.2f %9.0f %9.0f %7.2f\n", mo, n, b * 1000 / s, p, s, b * 1000 / p, s * p / (b * 1000) }'
  done
done
