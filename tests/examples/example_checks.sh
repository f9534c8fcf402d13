# Helpers the examples' check scripts source (tests/examples/*_test.sh); POSIX sh.
#   run_example PROGRAM ARGS...: runs it once, output kept in $out (and shown); a non-zero status fails.
#   field PREFIX N: word N (1-based, the prefix being word 1) of the first output line that starts with PREFIX.
#   check DESCRIPTION COMMAND...: counts a failure when the command fails.
#   finish: exits 1 when any check failed.
work=$(mktemp -d "${TMPDIR:-/tmp}/example_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out
failures=0

check() {
  what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}

run_example() {
  "$@" >"$out" 2>&1
  status=$?
  cat "$out"
  if [ "$status" -ne 0 ]; then
    echo "FAILED: $* exited with status $status"
    exit 1
  fi
}

field() {
  awk -v p="$1" -v n="$2" '$1 == p { print $n; exit }' "$out"
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed"
    exit 1
  fi
  exit 0
}
