#!/usr/bin/env bash
# Mixed-precision inference beside PyTorch 2.x: the forward of the MLP, the CNN and the character GPT with
# grad mode off, in f32 and under bf16 and fp16 autocast over the fp32 weights, at batch 1 (latency) and
# batch 256 (throughput; the GPT 32 sequences of 128), model after model in one run:
#   mantissa  bench/inference_bench (median of REPS repetitions)
#   PyTorch   bench/pytorch/inference.py under torch.inference_mode() and torch.autocast("cpu"), eager and
#             (MODES="eager compile") torch.compile(mode="max-autotune-no-cudagraphs")
# mantissa's bf16_wc / fp16_wc rows keep the weights' 16-bit copies (amp::ScopedWorkingCopies), beside
# PyTorch's autocast of the same precision. Each side reports its distance from its own f32 outputs on the
# same inputs (max |diff|, top-1 agreement).
# ratio = the faster PyTorch / mantissa (above 1: mantissa is faster).
#   bench/compare_inference.sh [build-dir]     MODELS="mlp cnn gpt" MODES="eager compile" THREADS=2 REPS=3
set -euo pipefail
build=${1:-build}
threads=${THREADS:-2}
reps=${REPS:-3}
models=${MODELS:-mlp cnn gpt}
modes=${MODES:-eager compile}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-${MANTISSA_BENCH_VENV:-$here/../build/bench-venv}/bin/python}
[ -x "$python" ] || { echo "compare_inference.sh: no $python; run scripts/install-deps.sh --bench (or make bench)" >&2; exit 1; }
[ -x "$build/bench/inference_bench" ] || { echo "compare_inference.sh: no $build/bench/inference_bench; make bench" >&2; exit 1; }
export OMP_NUM_THREADS=$threads
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; $(date -u '+%F %H:%M') UTC; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "versions: mantissa $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown); torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
printf '\n%-4s %-7s %5s %9s %9s %9s %7s | %9s %9s | %-10s %-9s | %-10s %-9s\n' model prec batch mt_ms pt_eager pt_compile \
  ratio mt_p99 pt_p99 mt_maxdiff mt_top1 pt_maxdiff pt_top1
for model in $models; do
  mt=$("$build/bench/inference_bench" --benchmark_format=json --benchmark_repetitions="$reps" \
         --benchmark_filter="^BM_Inference/$model/" --benchmark_report_aggregates_only=true 2>/dev/null |
       "$python" -c '
import json, sys
runs = json.load(sys.stdin)["benchmarks"]
medians = [r for r in runs if r.get("aggregate_name") == "median"]
for b in medians or runs:  # one repetition has no aggregates
    _, model, prec, batch = b["run_name"].split("/")[:4]
    print(model, prec, batch, b["real_time"], b["max_abs_diff"], b["top1_agree"], b["p99_ms"])')
  # shellcheck disable=SC2086
  pt=$("$python" "$here/pytorch/inference.py" --model "$model" --mode $modes --threads "$threads" 2>/dev/null |
       grep '^pytorch_infer')
  echo "$mt" | while read -r mo prec batch ms diff top1 p99; do
    ptp=${prec%_wc}  # mantissa's *_wc rows (persistent 16-bit weights) against PyTorch's autocast
    e=$(echo "$pt" | awk -v p="$ptp" -v b="$batch" '$3 == p && $4 == b && $5 == "eager" { print $6, $7, $8, $9 }')
    c=$(echo "$pt" | awk -v p="$ptp" -v b="$batch" '$3 == p && $4 == b && $5 == "compile" { print $6 }')
    awk -v mo="$mo" -v p="$prec" -v b="$batch" -v m="$ms" -v d="$diff" -v t="$top1" -v q="$p99" -v e="$e" \
      -v c="${c:-nan}" 'BEGIN {
      split(e, f, " "); best = f[1]; if (c != "nan" && c + 0 < best + 0) best = c
      printf "%-4s %-7s %5d %9.3f %9.3f %9.3f %7.2f | %9.3f %9.3f | %-10.3g %-9.4f | %-10.3g %-9.4f\n", mo, p, b, m, f[1], c,
        best / m, q, f[4], d, t, f[2], f[3] }'
  done
done
echo "(ms per forward: median, and p99 for the eager side; maxdiff and top1 against the same side's f32 outputs)"
