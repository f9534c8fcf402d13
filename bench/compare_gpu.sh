#!/usr/bin/env bash
# Issue 7's comparison on one GPU: mantissa (bench/gpu_step_bench) and PyTorch (bench/pytorch/gpu_step.py,
# eager; compiled too with MODES="eager compile") run the GPT-2-small-shaped GPT and the CNN in fp32, fp16 and
# bf16 one after the other, then this prints per row: ms/step, tokens or samples/s, MFU (against each side's
# measured bf16 GEMM peak), peak memory, and the speed ratio (PyTorch eager ms / mantissa ms: above 1 means
# mantissa is faster; with compiled rows also compiled ms / mantissa ms), plus mantissa's fp16/bf16 speed-up
# over its fp32 and fp16 peak memory as a share of fp32.
#   bench/compare_gpu.sh <dir holding gpu_step_bench> [steps]
#   bench/compare_gpu.sh --join <gpu_step_bench output> <gpu_step.py output>...   the table of saved outputs
#                                                    (scripts/device_check.sh runs the two sides on its own)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# The markdown table of the lines on stdin: `mantissa|pytorch|pytorch-compile <model> <precision> ms=...`.
join_table() {
  awk '
  function val(line, key,   m) { if (match(line, key "=[^ ]+")) return substr(line, RSTART + length(key) + 1, RLENGTH - length(key) - 1); return "" }
  function num(x) { return x == "" ? "-" : x }
  $1 == "mantissa" && $3 != "" && val($0, "ms") != "" { k = $2 " " $3; m_ms[k] = val($0, "ms"); m_it[k] = val($0, "items_per_s"); m_mfu[k] = val($0, "mfu"); m_gib[k] = val($0, "peak_gib"); order[++n] = k }
  $1 == "pytorch" && $3 != "" && val($0, "ms") != "" { k = $2 " " $3; p_ms[k] = val($0, "ms"); p_it[k] = val($0, "items_per_s"); p_mfu[k] = val($0, "mfu"); p_gib[k] = val($0, "peak_gib") }
  $1 == "pytorch-compile" && $3 != "" && val($0, "ms") != "" { k = $2 " " $3; c_ms[k] = val($0, "ms"); compiled = 1 }
  END {
    printf "| model | precision | mantissa ms | PyTorch ms |%s mantissa items/s | PyTorch items/s | mantissa MFU | PyTorch MFU | mantissa peak GiB | PyTorch peak GiB | ratio |%s\n", compiled ? " compiled ms |" : "", compiled ? " ratio compiled |" : ""
    printf "|---|---|---:|---:|%s---:|---:|---:|---:|---:|---:|---:|%s\n", compiled ? "---:|" : "", compiled ? "---:|" : ""
    for (i = 1; i <= n; ++i) { k = order[i]; split(k, a, " ")
      printf "| %s | %s | %.2f | %s |", a[1], a[2], m_ms[k], (k in p_ms) ? sprintf("%.2f", p_ms[k]) : "-"
      if (compiled) printf " %s |", (k in c_ms) ? sprintf("%.2f", c_ms[k]) : "-"
      printf " %.0f | %s | %.3f | %s | %.2f | %s | %s |", m_it[k], (k in p_it) ? sprintf("%.0f", p_it[k]) : "-", m_mfu[k], (k in p_mfu) ? sprintf("%.3f", p_mfu[k]) : "-", m_gib[k], (k in p_gib) ? sprintf("%.2f", p_gib[k]) : "-", (k in p_ms && m_ms[k] > 0) ? sprintf("%.2f", p_ms[k] / m_ms[k]) : "-"
      if (compiled) printf " %s |", (k in c_ms && m_ms[k] > 0) ? sprintf("%.2f", c_ms[k] / m_ms[k]) : "-"
      printf "\n" }
    split("gpt cnn", models, " ")
    for (j = 1; j <= 2; ++j) { f = models[j] " fp32"; if (!(f in m_ms)) continue
      for (q = 1; q <= 2; ++q) { lp = (q == 1 ? "fp16" : "bf16"); k = models[j] " " lp; if (!(k in m_ms)) continue
        printf "mantissa %s %s: %.2fx the fp32 speed, peak memory %.0f%% of fp32\n", models[j], lp, m_ms[f] / m_ms[k], 100 * m_gib[k] / m_gib[f] } }
  }'
}

if [[ ${1:-} == --join ]]; then
  shift
  cat "$@" | join_table
  exit 0
fi
bin=${1:?usage: compare_gpu.sh <dir with gpu_step_bench> [steps]}
steps=${2:-20}
mt=$("$bin/gpu_step_bench" --steps="$steps")
python=${PYTHON:-${MANTISSA_BENCH_VENV:-$here/../build/bench-venv}/bin/python}
# shellcheck disable=SC2086
pt=$("$python" "$here/pytorch/gpu_step.py" --steps "$steps" --mode ${MODES:-eager})
echo "$mt"
echo "$pt"
{ echo "$mt"; echo "$pt"; } | join_table
