#!/usr/bin/env bash
# FP8 on the CPU beside today's PyTorch, in one run: the scaled FP8 matmul (mantissa's scaled_mm, PyTorch's
# torch._scaled_mm: E4M3 x E4M3, per-tensor scales, bf16 out), the f32 and bf16 matmuls of the same shapes, and
# the per-tensor E4M3 quantization (amax + scale + saturating cast), each on the shapes of
# bench/fp8_gemm_bench.cc (square 1024/2048, the MLP's first layer at batch 128, the GPT's MLP up-projection at
# 32 x 128 tokens). mantissa: bench/fp8_gemm_bench (median of REPS repetitions); PyTorch:
# bench/pytorch/fp8_gemm.py, eager and torch.compile. ratio = the faster PyTorch / mantissa (above 1: mantissa
# is faster). %peak divides GFLOP/s by the measured peak (bench/cpu_peak) of the arithmetic the row runs:
# f32 FMA for mm_f32, the bf16 dot product for mm_bf16 and scaled_mm (whose CPU kernel decodes E4M3 exactly into
# bf16 and runs the bf16 GEMM into f32: a CPU has no FP8 arithmetic).
#   bench/compare_fp8.sh [build-dir]     THREADS=2 REPS=5 MODES=eager,compile
set -euo pipefail
build=${1:-build}
threads=${THREADS:-2}
reps=${REPS:-5}
modes=${MODES:-eager,compile}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-${MANTISSA_BENCH_VENV:-$here/../build/bench-venv}/bin/python}
[ -x "$python" ] || { echo "compare_fp8.sh: no $python; run scripts/install-deps.sh --bench (or make bench)" >&2; exit 1; }
for prog in bench/cpu_peak bench/fp8_gemm_bench; do
  [ -x "$build/$prog" ] || { echo "compare_fp8.sh: no $build/$prog; build with -DMANTISSA_BUILD_BENCH=ON (make bench)" >&2; exit 1; }
done
export OMP_NUM_THREADS=$threads
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; $(date -u '+%F %H:%M') UTC; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "versions: mantissa $(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown); torch $("$python" -c 'import torch; print(torch.__version__)')"
peaks=$("$build/bench/cpu_peak" --threads="$threads")
peak_of() { echo "$peaks" | awk -v k="$1" '$2 == k && $3 != "absent" { sub("gflops=", "", $4); print $4 }'; }
f32_peak=$(peak_of f32_fma_avx512); [ -n "$f32_peak" ] || f32_peak=$(peak_of f32_fma_avx2)
bf16_peak=$(peak_of bf16_dot_avx512); [ -n "$bf16_peak" ] || bf16_peak=$f32_peak
echo "peaks (GFLOP/s, measured): f32 FMA $f32_peak, bf16 dot $bf16_peak"

mt_json=$(mktemp) pt_out=$(mktemp)
trap 'rm -f "$mt_json" "$pt_out"' EXIT
"$build/bench/fp8_gemm_bench" --benchmark_format=json --benchmark_repetitions="$reps" \
  --benchmark_report_aggregates_only=true > "$mt_json" 2>/dev/null
"$python" "$here/pytorch/fp8_gemm.py" --threads "$threads" --modes "$modes" > "$pt_out"
"$python" - "$mt_json" "$pt_out" "$f32_peak" "$bf16_peak" <<'PY'
import json, sys
mt_path, pt_path, f32_peak, bf16_peak = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
runs = json.load(open(mt_path))["benchmarks"]
mt = {}
for r in runs:
    if r.get("aggregate_name", "median") != "median":
        continue
    name = r["run_name"].split("/real_time")[0]
    mt[name] = r
pt = {}
for line in open(pt_path):
    parts = line.split()
    if len(parts) >= 4 and parts[0] == "torch" and parts[3].startswith("ms="):
        pt[(parts[1], parts[2])] = float(parts[3][3:])
print("\n| case | shape | mantissa ms | GFLOP/s (GB/s) | %peak | PyTorch eager ms | PyTorch compile ms | ratio |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for name, r in mt.items():
    case, shape = name.split("/", 1)
    ms = r["real_time"]
    if r.get("time_unit") == "ns":
        ms /= 1e6
    elif r.get("time_unit") == "us":
        ms /= 1e3
    if "GFLOP" in r:
        rate = r["GFLOP"]
        peak = bf16_peak if case == "mm_bf16" or case.startswith("scaled_mm") else f32_peak
        rate_s, peak_s = f"{rate:.0f}", f"{100 * rate / peak:.0f}%"
    else:
        rate_s, peak_s = f"({r['GB']:.2f})", ""
    eager, comp = pt.get((name, "eager")), pt.get((name, "compile"))
    best = min([t for t in (eager, comp) if t is not None], default=None)
    fmt = lambda t: f"{t:.3f}" if t is not None else "n/a"
    ratio = f"{best / ms:.2f}" if best is not None else "n/a"
    print(f"| {case} | {shape} | {ms:.3f} | {rate_s} | {peak_s} | {fmt(eager)} | {fmt(comp)} | {ratio} |")
PY
