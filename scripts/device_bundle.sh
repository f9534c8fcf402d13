#!/usr/bin/env bash
# Packs the built test binary, benchmarks and programs with the shared libraries they load from Debian
# (Abseil, oneDNN, OpenBLAS, HDF5, Open MPI, GoogleTest, ...) into build-device/bundle.tar.xz, for a GPU
# machine that has CUDA 13 (cuBLAS, cuDNN, NCCL) but none of mantissa's Debian packages: the lent device.
# glibc and the CUDA libraries stay out (the device has its own, newer glibc and its CUDA 13).
#   scripts/device_bundle.sh [build-dir]           then run scripts/device_run.sh on the device, carrying
#                                                  build-device (the `run` tool's carry=["build-device"])
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build-device
stage=$out/bundle
rm -rf "$out"
mkdir -p "$stage/bin" "$stage/lib"
progs=("$build/tests/mantissa_tests")
for p in "$build"/bench/*_bench "$build"/train/mantissa-*; do [ -x "$p" ] && progs+=("$p"); done
cp "${progs[@]}" "$stage/bin/"
for p in "${progs[@]}"; do ldd "$p"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libresolv)\.so|/ld-linux|/usr/local/cuda|/libcuda\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
tar -C "$out" -cJf "$out/bundle.tar.xz" bundle
rm -rf "$stage"
echo "$out/bundle.tar.xz: $(du -h "$out/bundle.tar.xz" | cut -f1) ($(ls "$build"/tests/mantissa_tests >/dev/null && echo "${#progs[@]} programs"))"
