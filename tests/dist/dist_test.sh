#!/bin/sh
# The ProcessGroup tests under mpirun (issue 8). Usage: dist_test.sh MPIRUN PROGRAM NP MODE
#   MODE all:      tests/dist/dist_main.cc's checks on NP ranks; every rank must pass. NP 0: the program
#                  alone, without mpirun (a world of one).
#   MODE failures: the last rank fails on purpose (exit(1), abort(), an uncaught mantissa::Error, a hang,
#                  a broadcast of the wrong size) while the others wait in a collective; mpirun must end
#                  the job with a non-zero status within 30 s (not hang), and say why.
set -u
mpirun=$1 program=$2 np=$3 mode=$4
# --allow-run-as-root: CI containers run as root; --oversubscribe: more ranks than cores is fine here.
launch() { "$mpirun" --allow-run-as-root --oversubscribe -np "$np" "$program" "$@"; }

if [ "$mode" = all ] && [ "$np" -eq 0 ]; then
  "$program" all
  exit $?
elif [ "$mode" = all ]; then
  launch all
  exit $?
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
# mode | a line the output must contain
for case in "die-exit|rank 1 exits with status 1" "die-abort|signal 6" "die-throw|aborting the MPI job" \
            "hang|timed out" "mismatch|MPI_Test failed: MPI_ERR_TRUNCATE"; do
  what=${case%%|*} expected=${case#*|}
  start=$(date +%s)
  timeout 60 "$mpirun" --allow-run-as-root --oversubscribe -np "$np" "$program" "$what" >"$out" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$took" -gt 30 ] || ! grep -q "$expected" "$out"; then
    echo "FAIL $what: status $rc after ${took} s (want non-zero within 30 s, output with '$expected'):"
    cat "$out"
    status=1
  else
    echo "ok   $what: status $rc after ${took} s; $(grep -m1 "$expected" "$out")"
  fi
done
exit $status
