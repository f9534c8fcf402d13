#!/usr/bin/env bash
# Packs the built test binary, the GPU benchmarks and mantissa-train with the shared libraries they load
# from Debian (Abseil, oneDNN, OpenBLAS, HDF5, Open MPI, GoogleTest, ...) into build-device/bundle.tar.xz,
# for a GPU machine that has CUDA 13 (cuBLAS, cuDNN, NCCL) but none of mantissa's Debian packages: the lent
# device. glibc and the CUDA libraries stay out (the device has its own, newer glibc and its CUDA 13).
# Every program carries all of the library's GPU code (about 2.5 MB each, compressed) and the run tool
# carries 64 MiB with the working tree, so the CPU benchmarks stay out unless --all asks for them.
# BUILD_INFO in the bundle names the commit and the build's settings; scripts/device_check.sh copies it into
# its report.
#   scripts/device_bundle.sh [--all] [build-dir]   then run scripts/device_check.sh on the device, carrying
#                                                  build-device (the `run` tool's carry=["build-device"])
set -euo pipefail
all=0
[[ ${1:-} == --all ]] && { all=1; shift; }
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build-device
stage=$out/bundle
[[ -x $build/tests/mantissa_tests ]] || { echo "device_bundle.sh: no $build/tests/mantissa_tests: build it first" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$stage/bin" "$stage/lib"
progs=("$build/tests/mantissa_tests")
if [[ $all -eq 1 ]]; then
  candidates=("$build"/bench/*_bench "$build"/train/mantissa-*)
else
  candidates=("$build"/bench/cuda_*_bench "$build"/bench/gpu_*_bench "$build"/bench/nccl_*_bench "$build"/train/mantissa-train)
fi
for p in "${candidates[@]}"; do [ -x "$p" ] && progs+=("$p"); done
cp "${progs[@]}" "$stage/bin/"
for p in "${progs[@]}"; do ldd "$p"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv)\.so|/ld-linux|/usr/local/cuda|/libcuda\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
setting() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null; }
{
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo "+changes"),"
  echo "bundled $(date -u '+%Y-%m-%d %H:%M UTC') from $(basename "$(cd "$build" && pwd)"), $(setting CMAKE_BUILD_TYPE),"
  echo "MANTISSA_CUDA=$(setting MANTISSA_CUDA), CUDA code for"
  grep -o -E -- '--generate-code=arch=[^ ]*' "$build/build.ninja" 2>/dev/null | sed 's/--generate-code=//' | sort -u | paste -sd' '
} >"$stage/BUILD_INFO"
tar -C "$out" -cJf "$out/bundle.tar.xz" bundle
rm -rf "$stage"
echo "$out/bundle.tar.xz: $(du -h "$out/bundle.tar.xz" | cut -f1) (${#progs[@]} programs)"
