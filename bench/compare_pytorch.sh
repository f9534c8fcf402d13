#!/usr/bin/env bash
# Runs the MLP training step in mantissa and in PyTorch (Debian's python3-torch) on the same shapes,
# batch, precision and thread count, one after the other in one run, and prints seconds per step and
# the ratio (PyTorch time / mantissa time: above 1 means mantissa is faster).
#   bench/compare_pytorch.sh [build-dir]      (make bench builds the programs and installs torch)
set -euo pipefail
build=${1:-build}
threads=${THREADS:-2}
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=$threads
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; $(date -u +%F)"
mt=$("$build/bench/mlp_step_bench" --benchmark_format=csv --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true 2>/dev/null | grep '_median' )
pt=$(/usr/bin/python3 "$here/pytorch/mlp_step.py" --threads "$threads" --steps 50 --warmup 10)
printf '%-16s %12s %12s %8s\n' precision mantissa_ms pytorch_ms ratio
for prec in f32 bf16_autocast; do
  m=$(echo "$mt" | grep "BM_MlpStep/$prec" | cut -d, -f3)   # real_time in ms
  p=$(echo "$pt" | awk -v k="pytorch_mlp_step_$prec" '$1 == k { print $2 * 1000 }')
  awk -v n="$prec" -v m="$m" -v p="$p" 'BEGIN { printf "%-16s %12.2f %12.2f %8.2f\n", n, m, p, p / m }'
done
