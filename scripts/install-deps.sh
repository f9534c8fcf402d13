#!/usr/bin/env bash
# Installs the Debian packages mantissa needs, only those missing: quiet and under a second when all are
# present. Usage: scripts/install-deps.sh [--bench]   (--bench adds python3-torch for the PyTorch comparison and time for peak memory)
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev libabsl-dev
  libopenblas-dev libdnnl-dev libhdf5-dev hdf5-tools zlib1g-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist fortunes  # data: Fashion-MNIST IDX files, plain-text fortunes for the char GPT
  gnuplot-nox python3-h5py        # train: metrics chart to PNG; checkpoint interop test (h5py reads our files)
  clang-format                    # ctest format: the tree stays as .clang-format writes it
)
bench_packages=(python3-torch time)  # time: /usr/bin/time, the peak memory of bench/recompute_gpt.sh

for arg in "$@"; do
  case "$arg" in
    --bench) packages+=("${bench_packages[@]}") ;;
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
[[ ${#missing[@]} -eq 0 ]] && exit 0

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
