#!/usr/bin/env bash
# mantissa beside today's PyTorch: one whole training step (zero_grad, forward and mean cross-entropy,
# backward, Adam) of the MLP (784-1024-1024-10, batch 256), the CNN (batch 128) and the character GPT
# (n_layer 4, n_head 4, n_embd 256, block 128, batch 32), in f32, bf16 autocast, and fp16 autocast with a
# GradScaler, with the same shapes, optimizer, precision and thread count, case after case in one run. On request
# (MODELS=gpt2s) also GPT-2 small (124M parameters: vocab 50257, 12 layers, 12 heads, 768 wide, block 1024) at
# batch 1, f32 and bf16 only (fp16 is skipped for it), 3 timed steps per repetition (seconds per step; REPS
# defaults to 1 for it, GPT2S_REPS sets it), left out of the Trainer rows (mantissa-train's synthetic data has
# the character vocabulary):
#   mantissa  bench/{mlp,cnn,gpt}_step_bench (median of REPS repetitions; the faster of autocast re-casting
#             the weights and the optimizer's persistent 16-bit working copies, marked "wc");
#   PyTorch   bench/pytorch/train_step.py, eager (Adam fused=True, the CNN in its faster memory format) and
#             torch.compile(mode="max-autotune-no-cudagraphs") from an empty inductor cache.
# ratio = the faster PyTorch / mantissa (above 1: mantissa is faster). GFLOP/s counts the step's GEMM and
# convolution FLOPs (the benches say how); %peak divides it by this CPU's measured peak (bench/cpu_peak) for
# the arithmetic the row's GEMMs run in: f32 FMA for f32 and fp16 (no AVX512-FP16 here: f16 GEMMs widen to
# f32), AVX512-BF16 dot products for bf16. Then, with TRAINER=1, the same steps through mantissa-train
# (--data=synthetic: the Trainer's whole step with its loader, grad norm and metrics; the median step).
#   bench/compare_pytorch.sh [build-dir]      (make bench builds the programs and installs torch)
#   MODELS="mlp cnn gpt" (or gpt2s) PRECISIONS="f32 bf16 fp16" MODES="eager compile" THREADS=2 REPS=5 STEPS=30
#   BUDGET=20 (PyTorch's seconds of timed steps per case) TRAINER=1 are the defaults.
set -euo pipefail
build=${1:-build}
threads=${THREADS:-2}
reps=${REPS:-5}
steps=${STEPS:-30}
budget=${BUDGET:-20}
models=${MODELS:-mlp cnn gpt}
precisions=${PRECISIONS:-f32 bf16 fp16}
modes=${MODES:-eager compile}
trainer=${TRAINER:-1}
here=$(cd "$(dirname "$0")" && pwd)
# PyTorch's interpreter: $PYTHON, or the --bench virtual environment.
python=${PYTHON:-${MANTISSA_BENCH_VENV:-$here/../build/bench-venv}/bin/python}
[ -x "$python" ] || { echo "compare_pytorch.sh: no $python; run scripts/install-deps.sh --bench (or make bench)" >&2; exit 1; }
for prog in bench/cpu_peak bench/mlp_step_bench bench/cnn_step_bench bench/gpt_step_bench train/mantissa-train; do
  [ -x "$build/$prog" ] || { echo "compare_pytorch.sh: no $build/$prog; build with -DMANTISSA_BUILD_BENCH=ON (make bench)" >&2; exit 1; }
done
export OMP_NUM_THREADS=$threads
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; $(date -u '+%F %H:%M') UTC; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "versions: mantissa $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown); torch $torch_version"

# The denominators of %peak, measured.
peaks=$("$build/bench/cpu_peak" --threads="$threads")
echo "$peaks" | sed 's/^/  /'
peak_of() { echo "$peaks" | awk -v k="$1" '$2 == k && $3 != "absent" { sub("gflops=", "", $4); print $4 }'; }
f32_peak=$(peak_of f32_fma_avx512); [ -n "$f32_peak" ] || f32_peak=$(peak_of f32_fma_avx2)
bf16_peak=$(peak_of bf16_dot_avx512); [ -n "$bf16_peak" ] || bf16_peak=$f32_peak
f16_peak=$(peak_of f16_fma_avx512); [ -n "$f16_peak" ] || f16_peak=$f32_peak

# mantissa's median ms and model GFLOP/s of one benchmark, from Google Benchmark's JSON.
median_of() {  # bench name [repetitions]
  "$build/bench/$1" --benchmark_format=json --benchmark_repetitions="${3:-$reps}" \
    --benchmark_filter="^$2/(iterations:[0-9]+/)?real_time\$" \
    --benchmark_report_aggregates_only=true 2>/dev/null | "$python" -c '
import json, sys
runs = json.load(sys.stdin)["benchmarks"]
b = [r for r in runs if r.get("aggregate_name") == "median"] or runs  # one repetition has no aggregates
print(b[0]["real_time"], b[0]["model_GFLOPs"])'
}

printf '\n%-4s %-8s %6s %8s %6s %10s %10s %8s %7s\n' model prec mt_ms GFLOP/s %peak pt_eager pt_compile compile ratio
for model in $models; do
  model_reps=$reps
  case $model in
    mlp) bench=mlp_step_bench; bm=BM_MlpStep; batch=256 ;;
    cnn) bench=cnn_step_bench; bm=BM_CnnStep; batch=128 ;;
    gpt) bench=gpt_step_bench; bm=BM_GptStep; batch=32 ;;
    gpt2s) bench=gpt_step_bench; bm=BM_Gpt2sStep; batch=1; model_reps=${GPT2S_REPS:-1} ;;
    *) echo "compare_pytorch.sh: unknown model '$model' (mlp, cnn, gpt, gpt2s)" >&2; exit 2 ;;
  esac
  for prec in $precisions; do
    if [ "$model" = gpt2s ] && [ "$prec" = fp16 ]; then echo "gpt2s fp16: skipped (f32 and bf16 only)"; continue; fi
    case $prec in
      f32) names="f32"; peak=$f32_peak ;;
      bf16) names="bf16_autocast bf16_autocast_working_copies"; peak=$bf16_peak ;;
      fp16) names="fp16_scaled fp16_scaled_working_copies"; peak=$f16_peak ;;
      *) echo "compare_pytorch.sh: unknown precision '$prec' (f32, bf16, fp16)" >&2; exit 2 ;;
    esac
    best_ms="" best_gf="" best_name=""
    for name in $names; do
      read -r ms gf < <(median_of "$bench" "$bm/$name" "$model_reps")
      if [ -z "$best_ms" ] || awk -v a="$ms" -v b="$best_ms" 'BEGIN { exit !(a < b) }'; then
        best_ms=$ms best_gf=$gf best_name=$name
      fi
    done
    # shellcheck disable=SC2086
    pt=$("$python" "$here/pytorch/train_step.py" --model "$model" --precision "$prec" --mode $modes \
           --threads "$threads" --steps "$steps" --budget "$budget" 2>/dev/null | grep '^pytorch_step')
    eager=$(echo "$pt" | awk '$4 == "eager" { print $5 * 1000 }')
    compiled=$(echo "$pt" | awk '$4 == "compile" { print $5 * 1000 }')
    compile_s=$(echo "$pt" | awk '$4 == "compile" { print $6 }')
    wc=""; case $best_name in *working_copies) wc=" wc" ;; esac
    awk -v mo="$model" -v p="$prec$wc" -v m="$best_ms" -v g="$best_gf" -v pk="$peak" -v e="${eager:-nan}" \
        -v c="${compiled:-nan}" -v cs="${compile_s:-nan}" 'BEGIN {
      best = e; if (c != "nan" && (best == "nan" || c + 0 < best + 0)) best = c
      printf "%-4s %-8s %6.2f %8.0f %5.0f%% %10.2f %10.2f %7.1fs %7.2f\n", mo, p, m, g, 100 * g / pk, e, c, cs, best / m }'
  done
done
echo "(ms per step; pt_compile's first step, compile, includes the compilation; wc: with working copies)"

[ "$trainer" = 1 ] || exit 0
# The Trainer's whole step, against the same PyTorch steps (eager, which needs no compile).
printf '\n%-4s %-5s %12s %12s %7s\n' model prec trainer_ms pt_eager_ms ratio
for model in $models; do
  case $model in
    gpt2s) continue ;;  # the synthetic data has the character vocabulary (65), not GPT-2's
    mlp) flags="--batch_size=256"; n=$((steps + 10)) ;;
    cnn) flags="--batch_size=128"; n=$((steps + 10)) ;;
    gpt) flags="--batch_size=32 --n_layer=4 --n_head=4 --n_embd=256 --block_size=128"; n=20 ;;
  esac
  for prec in $precisions; do
    flag=$prec; [ "$prec" = f32 ] && flag=fp32
    metrics=$(mktemp)
    # shellcheck disable=SC2086
    "$build/train/mantissa-train" --model="$model" --data=synthetic --precision="$flag" $flags --optimizer=adam \
      --max_steps=$n --eval_batches=1 --threads="$threads" --progress=none --metrics="$metrics" >/dev/null
    s=$(sed -n 's/.*"event": "summary".*"samples_per_s": \([0-9.e+]*\).*/\1/p' "$metrics")
    rm -f "$metrics"
    e=$("$python" "$here/pytorch/train_step.py" --model "$model" --precision "$prec" --mode eager --threads "$threads" \
          --steps "$steps" --budget "$budget" 2>/dev/null | awk '$1 == "pytorch_step" { print $5 * 1000 }')
    b=$(case $model in mlp) echo 256 ;; cnn) echo 128 ;; gpt) echo 32 ;; esac)
    awk -v mo="$model" -v p="$prec" -v s="$s" -v e="$e" -v b="$b" 'BEGIN {
      printf "%-4s %-5s %12.2f %12.2f %7.2f\n", mo, p, b * 1000 / s, e, e * s / (b * 1000) }'
  done
done
