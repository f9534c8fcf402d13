#!/bin/sh
# Formats the C++ sources with the project's .clang-format (clang-format 14, Debian 12's clang-format
# package). --check changes nothing and lists the files that differ (exit 1 when there are any).
set -eu
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
# The source folders, read without git (the clean room builds a checkout that has no git in it).
files=$(find framework ops optim amp data models train examples tests bench -type f \
  \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
if [ "${1:-}" = "--check" ]; then
  # shellcheck disable=SC2086
  if ! out=$(clang-format --style=file --dry-run $files 2>&1); then
    echo "format.sh: clang-format failed:" >&2; echo "$out" >&2; exit 2
  fi
  differ=$(printf '%s\n' "$out" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
  [ -z "$differ" ] && exit 0
  echo "format.sh: these files differ from .clang-format's layout (run scripts/format.sh):"
  echo "$differ"
  exit 1
fi
# shellcheck disable=SC2086
clang-format --style=file -i $files
