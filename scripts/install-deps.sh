#!/usr/bin/env bash
# Installs the Debian packages mantissa needs, only those missing: quiet and under a second when all are
# present. Usage: scripts/install-deps.sh [--bench]
# `packages` is what the library, its programs and its tests need (the tests use Debian's PyTorch, never
# PyPI's). --bench also sets up the benchmark side: /usr/bin/time (peak memory) and a Python virtual
# environment with PyTorch and TensorBoard from PyPI (pinned below; about 5.4 GB with the CUDA runtime wheels
# the Linux wheel pulls, under a minute to install on a fast link) at $MANTISSA_BENCH_VENV, by default
# build/bench-venv. Nothing in the library, its tests or CI uses it.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev libabsl-dev
  nlohmann-json3-dev              # test: the profiler's tests parse every trace and table they write
  libopenblas-dev libdnnl-dev libhdf5-dev hdf5-tools zlib1g-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist fortunes  # data: Fashion-MNIST IDX files, plain-text fortunes for the char GPT
  gnuplot-nox                     # train: metrics chart to PNG
  python3-h5py python3-torch      # test: checkpoint.md's PyTorch lines load a checkpoint (Debian's torch
                                  # 1.13: 165 packages, 133 MB to download, ~80 s to install on 2 cores)
  clang-format                    # ctest format: the tree stays as .clang-format writes it
  iproute2                        # ctest dist_two_host: `ip netns`, two hosts as two network namespaces
                                  # (not in debootstrap's minbase, so the clean room needs it named)
)
bench_packages=(python3-venv time)  # time: /usr/bin/time, the peak memory of bench/recompute_gpt.sh
# The PyTorch the comparisons run against: today's release, pinned so that figures stay comparable; and
# TensorBoard, whose own reader scripts/tensorboard_check.py loads mantissa-train's --tensorboard files with;
# Holistic Trace Analysis, which bench/pytorch/hta_read_trace.py loads mantissa-train --profile's traces with.
bench_pip=(torch==2.15.0 numpy==2.4.6 h5py==3.16.0 tensorboard==2.21.0
           HolisticTraceAnalysis==0.5.0  # the independent reader of the profiler's traces
           torchao==0.18.0               # scripts/golden/mx.py: the reference MX casts
           bitsandbytes==0.50.2)         # scripts/golden/low_precision_optim.py: the 8-bit optimizer state
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${MANTISSA_BENCH_VENV:-$repo/build/bench-venv}

bench=0
for arg in "$@"; do
  case "$arg" in
    --bench) packages+=("${bench_packages[@]}"); bench=1 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (expected --bench)" >&2; exit 2 ;;
  esac
done

# One dpkg-query for all: prints "name status" for the known ones; db:Status-Status is "installed" only for
# a fully installed package (not half-configured, not removed).
declare -A status=()
while read -r name state; do
  status[${name%%:*}]=$state
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
  [[ "${status[$p]:-}" == "installed" ]] || missing+=("$p")
done

# The virtual environment: made when missing, filled when a pinned version is not there (a marker file
# holds the list it was filled with, so that the check costs nothing).
bench_venv() {
  local want="${bench_pip[*]}"
  [[ -f "$venv/.mantissa-pins" && "$(cat "$venv/.mantissa-pins")" == "$want" ]] && return 0
  echo "install-deps.sh: installing ${want} into $venv" >&2
  local started
  started=$(date +%s)
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --progress-bar off "${bench_pip[@]}"
  echo "$want" >"$venv/.mantissa-pins"
  echo "install-deps.sh: $venv ready in $(($(date +%s) - started)) s ($(du -sh "$venv" | cut -f1))" >&2
}

if [[ ${#missing[@]} -eq 0 ]]; then
  [[ $bench -eq 1 ]] && bench_venv
  exit 0
fi

echo "install-deps.sh: installing ${missing[*]}" >&2
started=$(date +%s)
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps.sh: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
# Another apt run (an unattended upgrade, a second make) may hold the lock: wait for it up to 10 minutes.
apt_opts=(-o DPkg::Lock::Timeout=600)
"${sudo[@]}" apt-get "${apt_opts[@]}" -qq update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" -q install -y --no-install-recommends \
  "${missing[@]}"
echo "install-deps.sh: done in $(( $(date +%s) - started )) s" >&2
[[ $bench -eq 1 ]] && bench_venv
exit 0
