#!/usr/bin/env bash
# Issue 7's comparison on one GPU: mantissa (bench/gpu_step_bench) and PyTorch eager
# (bench/pytorch/gpu_step.py) run the GPT-2-small-shaped GPT and the CNN in fp32, fp16 and bf16 one after
# the other, then this prints per row: ms/step, tokens or samples/s, MFU (against each side's measured bf16
# GEMM peak), peak memory, and the speed ratio (PyTorch ms / mantissa ms: above 1 means mantissa is
# faster), plus mantissa's fp16/bf16 speed-up over its fp32 and fp16 peak memory as a share of fp32.
#   bench/compare_gpu.sh <dir holding gpu_step_bench> [steps]
set -euo pipefail
bin=${1:?usage: compare_gpu.sh <dir with gpu_step_bench> [steps]}
steps=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
mt=$("$bin/gpu_step_bench" --steps="$steps")
python=${PYTHON:-${MANTISSA_BENCH_VENV:-$here/../build/bench-venv}/bin/python}
pt=$("$python" "$here/pytorch/gpu_step.py" --steps "$steps")
echo "$mt"
echo "$pt"
{ echo "$mt"; echo "$pt"; } | awk '
  function val(line, key,   m) { if (match(line, key "=[^ ]+")) return substr(line, RSTART + length(key) + 1, RLENGTH - length(key) - 1); return "" }
  $1 == "mantissa" && $3 != "" { k = $2 " " $3; m_ms[k] = val($0, "ms"); m_it[k] = val($0, "items_per_s"); m_mfu[k] = val($0, "mfu"); m_gib[k] = val($0, "peak_gib"); order[++n] = k }
  $1 == "pytorch" && $3 != "" { k = $2 " " $3; p_ms[k] = val($0, "ms"); p_it[k] = val($0, "items_per_s"); p_mfu[k] = val($0, "mfu"); p_gib[k] = val($0, "peak_gib") }
  END {
    printf "| model | precision | mantissa ms | PyTorch ms | mantissa items/s | PyTorch items/s | mantissa MFU | PyTorch MFU | mantissa peak GiB | PyTorch peak GiB | ratio |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    for (i = 1; i <= n; ++i) { k = order[i]; split(k, a, " ")
      printf "| %s | %s | %.2f | %.2f | %.0f | %.0f | %.3f | %.3f | %.2f | %.2f | %.2f |\n", a[1], a[2], m_ms[k], p_ms[k], m_it[k], p_it[k], m_mfu[k], p_mfu[k], m_gib[k], p_gib[k], (m_ms[k] > 0 ? p_ms[k] / m_ms[k] : 0) }
    split("gpt cnn", models, " ")
    for (j = 1; j <= 2; ++j) { f = models[j] " fp32"; if (!(f in m_ms)) continue
      for (q = 1; q <= 2; ++q) { lp = (q == 1 ? "fp16" : "bf16"); k = models[j] " " lp; if (!(k in m_ms)) continue
        printf "mantissa %s %s: %.2fx the fp32 speed, peak memory %.0f%% of fp32\n", models[j], lp, m_ms[f] / m_ms[k], 100 * m_gib[k] / m_gib[f] } }
  }'
