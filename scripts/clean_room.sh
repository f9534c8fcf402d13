#!/usr/bin/env bash
# Runs a README command (`make <target>`, default `make test`) in a clean room: a bare Debian 12 root made
# by debootstrap, holding nothing but a fresh clone of this repository's HEAD and /usr/local/cuda (bind-
# mounted read-only, as on every machine of this kind). Inside, the command must install every package it
# needs (scripts/install-deps.sh), configure, build and run: a missing install step fails here instead of
# on a new user's first try. CI runs the test suite this way (.ci/run).
#
#   scripts/clean_room.sh [make target]      e.g. `scripts/clean_room.sh demo`
#
# Needs root (chroot, mount namespaces) and debootstrap (installed when missing). Environment:
#   MANTISSA_CLEAN_ROOM_CACHE  folder for what is kept between runs on this machine, outside the checkout
#                              (default /var/cache/mantissa-clean-room): the debootstrap base tarball
#                              (rebuilt after 7 days), the downloaded .deb files, a ccache of compiler output
#   MANTISSA_CLEAN_ROOM_COLD=1 use none of that cache (and leave it untouched): a cold run from nothing
#   MANTISSA_CLEAN_ROOM_KEEP=1 keep the room's folder after the run (its path is printed)
#   MANTISSA_WERROR, MANTISSA_CUDA, MANTISSA_MPI, JOBS are passed to make inside.
#
# What the room is: debootstrap's minbase variant of bookworm (dpkg, apt, bash, coreutils; no compiler,
# no make, no git), Debian's own mirrors (bookworm, -updates, -security). Before the command, the room
# installs `make`, which the README's commands presuppose (and ccache when the cache is used): nothing
# else. The caches cannot hide a missing step: .deb files still have to be named and installed by
# install-deps.sh, and ccache runs the real compiler whenever a source or any header it reads differs
# (a header from a package that is not installed is a miss, then a compile error).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
target=${1:-test}
suite=bookworm
mirror=${MANTISSA_CLEAN_ROOM_MIRROR:-http://deb.debian.org/debian}
cache=${MANTISSA_CLEAN_ROOM_CACHE:-/var/cache/mantissa-clean-room}
cold=${MANTISSA_CLEAN_ROOM_COLD:-0}
keep=${MANTISSA_CLEAN_ROOM_KEEP:-0}

say() { echo "clean_room: $*" >&2; }
die() { say "$*"; exit 1; }
elapsed() { echo $(( $(date +%s) - $1 )); }

[[ $# -le 1 && $target =~ ^[a-z][a-z-]*$ ]] ||
  { echo "usage: scripts/clean_room.sh [make target]   (e.g. test, demo, build)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || die "needs root (chroot and mount namespaces); run it with sudo"
for tool in unshare chroot git tar; do
  command -v "$tool" >/dev/null || die "needs '$tool' on this machine"
done
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends debootstrap \
    >/dev/null || die "cannot install debootstrap"
fi
if [[ -n $(git -C "$here" status --porcelain --untracked-files=no) ]]; then
  say "note: the checkout has uncommitted changes; the room tests HEAD ($(git -C "$here" rev-parse --short HEAD)) only"
fi

t_all=$(date +%s)
if [[ $cold == 1 ]]; then
  work=$(mktemp -d /var/tmp/mantissa-clean-room.XXXXXX)
else
  mkdir -p "$cache"/rooms "$cache"/debs "$cache"/ccache
  work=$(mktemp -d "$cache"/rooms/room.XXXXXX)
fi
room=$work/root
cleanup() {
  local rc=$?
  if [[ $keep == 1 ]]; then
    say "kept the room: $room"
  elif findmnt -rn -o TARGET | grep -q "^$work"; then
    say "something is still mounted under $work; not removing it"  # never rm through a mount
  else
    rm -rf --one-file-system "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT

# ---- The base system: debootstrap once, then a tarball in the cache (a week at most) ----
t=$(date +%s)
base=$cache/base-$suite-minbase.tar
make_base() {  # $1: folder to debootstrap into
  debootstrap --variant=minbase "$suite" "$1" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
}
if [[ $cold == 1 ]]; then
  say "debootstrap $suite (minbase), no cache"
  make_base "$room"
else
  if [[ ! -f $base || -n $(find "$base" -mtime +7) ]]; then
    say "debootstrap $suite (minbase) into the cache"
    make_base "$work/base"
    tar -C "$work/base" -cf "$base.tmp.$$" . && mv "$base.tmp.$$" "$base"
    rm -rf --one-file-system "$work/base"
  fi
  mkdir -p "$room" && tar -C "$room" -xf "$base"
fi
say "base system ready ($(elapsed "$t") s)"

# ---- The room: Debian's mirrors, name resolution, the repository as a new user clones it ----
cat >"$room/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
EOF
cp /etc/resolv.conf "$room/etc/resolv.conf"
cp /etc/hosts "$room/etc/hosts"
git clone --quiet --no-hardlinks "$here" "$room/mantissa"
cuda_dir=""
if [[ -d /usr/local/cuda ]]; then
  cuda_dir=$(readlink -f /usr/local/cuda)  # e.g. /usr/local/cuda-13.0, with the cuda symlink beside it
  mkdir -p "$room$cuda_dir"
  [[ $cuda_dir == /usr/local/cuda ]] || ln -s "$cuda_dir" "$room/usr/local/cuda"
else
  say "note: no /usr/local/cuda on this machine; the room builds without CUDA"
fi

# Inside the room: make (the README presupposes it) and, with the cache, ccache; then `make <target>`.
prep="make"
launcher_env=()
if [[ $cold != 1 ]]; then
  prep="make ccache"
  mkdir -p "$room/var/cache/ccache"
  launcher_env=(CCACHE_DIR=/var/cache/ccache CCACHE_MAXSIZE=10G CCACHE_BASEDIR=/mantissa
                CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
                CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
room_env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
          TERM=dumb CI="${CI:-}" "${launcher_env[@]}")
for v in MANTISSA_WERROR MANTISSA_CUDA MANTISSA_MPI JOBS; do
  [[ -n ${!v:-} ]] && room_env+=("$v=${!v}")
done
cat >"$room/run-in-room.sh" <<EOF
#!/bin/bash
set -euo pipefail
t=\$(date +%s)
apt-get -qq update
DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends $prep >/dev/null
echo "clean_room: installed $prep (\$(( \$(date +%s) - t )) s); now: make $target" >&2
cd /mantissa
make $target
EOF
chmod +x "$room/run-in-room.sh"

# ---- Run it: a private mount and PID namespace, so every mount and process ends with the command ----
t=$(date +%s)
set +e
unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
  room=$1 cuda_dir=$2 cache=$3 cold=$4; shift 4
  # The root of the room is a mount point, as / is on a machine: `unshare --mount` inside (the disk-full
  # test) changes the propagation of / and fails with EINVAL on a plain folder.
  mount --bind "$room" "$room"
  mount -t proc proc "$room/proc"
  mount --rbind /sys "$room/sys"
  mount --rbind /dev "$room/dev"
  mount -t tmpfs -o mode=1777,size=4g tmpfs "$room/dev/shm"   # MPI ranks share memory through it
  if [[ -n $cuda_dir ]]; then
    mount --bind "$cuda_dir" "$room$cuda_dir" && mount -o remount,bind,ro "$room$cuda_dir"
  fi
  if [[ $cold != 1 ]]; then
    mount --bind "$cache/debs" "$room/var/cache/apt/archives"
    mount --bind "$cache/ccache" "$room/var/cache/ccache"
  fi
  exec chroot "$room" env -i "$@" /run-in-room.sh
' clean-room "$room" "$cuda_dir" "$cache" "$cold" "${room_env[@]}"
rc=$?
set -e
if [[ $rc -eq 0 ]]; then
  say "make $target passed in a fresh Debian 12 room: $(elapsed "$t") s inside, $(elapsed "$t_all") s in all"
else
  say "make $target FAILED in the room (exit $rc) after $(elapsed "$t") s"
fi
exit "$rc"
