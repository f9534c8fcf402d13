#!/usr/bin/env bash
# On the GPU machine, from the repository root with build-device/ carried (scripts/device_bundle.sh):
# unpacks the bundle and runs the CUDA tests, then the benchmarks given as arguments (programs in the
# bundle's bin/ with their flags, one quoted string each). Logs go to $OUT (or /tmp) as well.
#   scripts/device_run.sh                                   the CUDA tests only
#   scripts/device_run.sh "cuda_gemm_bench --benchmark_min_time=0.2s"
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
work=$(mktemp -d)
tar -C "$work" -xJf "$root/build-device/bundle.tar.xz"
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | paste -sd:)
pip_libs=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | paste -sd:)
export LD_LIBRARY_PATH=$work/bundle/lib:$cuda_libs:$pip_libs:${LD_LIBRARY_PATH:-}
export MANTISSA_GOLDEN_DIR=$root/tests/golden
export PATH=$work/bundle/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
mantissa_tests --gtest_filter='Cuda*:*Cuda*:*Gpu*:Nccl*' --gtest_brief=1 2>&1 | tee "$out/cuda_tests.log" | tail -40
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
for bench in "$@"; do
  name=${bench%% *}
  echo "== $bench"
  # shellcheck disable=SC2086
  $bench 2>&1 | tee "$out/$name.log" | tail -30
done
exit $status
