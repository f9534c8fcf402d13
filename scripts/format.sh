#!/bin/sh
# Formats the C++ sources with the project's .clang-format (clang-format 14, Debian 12's clang-format
# package). --check changes nothing and lists the files that differ (exit 1 when there are any).
set -eu
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 2; }
files=$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  status=0
  for f in $files; do
    clang-format --style=file "$f" | cmp -s - "$f" || { echo "$f"; status=1; }
  done
  exit $status
fi
# shellcheck disable=SC2086
clang-format --style=file -i $files
