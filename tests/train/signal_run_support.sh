# Shared by stop_test.sh and soak_test.sh (sourced, after they set $prog and $work): mantissa-train in the
# background, waiting for its steps, ending it with a time limit, and comparing runs. $work is removed at
# exit, with any process still running.
watchdog='' pid=''
cleanup() {
  [ -n "$watchdog" ] && { pkill -P "$watchdog" 2>/dev/null; kill "$watchdog" 2>/dev/null; }
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

# The program in the background with SIGINT at its default: a shell without job control starts background
# commands with SIGINT ignored, and the subshell's `trap -` restores it before the exec. Sets $pid.
start() {  # start OUT ERR ARGS...
  local out=$1 err=$2
  shift 2
  ( trap - INT QUIT; exec "$prog" "$@" ) >"$out" 2>"$err" &
  pid=$!
}
alive() { kill -0 "$pid" 2>/dev/null && ! grep -q '^State:.*zombie' "/proc/$pid/status" 2>/dev/null; }
# The last complete step line's step in a metrics file (0 if none yet); a line still being written has no
# comma after its number yet.
last_step() { tail -n 4 "$1" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p' | tail -1 | grep . || echo 0; }
# Whether $pid has FILE open: then it has dealt with what an earlier run left in it.
has_open() {
  local f want
  want=$(readlink -f "$1")
  for f in /proc/"$pid"/fd/*; do [ "$(readlink "$f" 2>/dev/null)" = "$want" ] && return 0; done
  return 1
}
# Waits (30 s at most) until the process has FILE open and FILE has reached step MIN, or the process ended.
wait_step() {  # wait_step FILE MIN
  local i=0
  while { ! has_open "$1" || [ "$(last_step "$1")" -lt "$2" ]; } && alive && [ $i -lt 1500 ]; do
    sleep 0.02; i=$((i + 1))
  done
}
# A temporary file (.<name>.tmp.<pid>) of a write in progress, or left behind, in folder DIR.
has_tmp() { local f; for f in "$1"/.*.tmp.*; do [ -e "$f" ] && return 0; done; return 1; }
listing() { (cd "$1" 2>/dev/null && echo .* *) | sed 's/^\. \.\. *//'; }
rand_sleep() { sleep "$(awk -v r="$RANDOM" -v m="$1" 'BEGIN { printf "%.3f", m * r / 32767 }')"; }
# Waits for $pid (LIMIT seconds at most, then SIGKILL) and sets $rc and $took (seconds, 2 decimals).
finish() {  # finish LIMIT
  local t0
  t0=$(date +%s.%N)
  ( sleep "$1"; kill -KILL "$pid" ) </dev/null >/dev/null 2>&1 &
  watchdog=$!
  wait "$pid" 2>/dev/null  # (no "Aborted" line from the shell: the status says it)
  rc=$?
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  pkill -P "$watchdog" 2>/dev/null
  kill "$watchdog" 2>/dev/null
  wait "$watchdog" 2>/dev/null
  watchdog='' pid=''
}
# The metrics lines that do not vary from run to run: no timing fields, no stopped/resumed events.
normalized() {
  grep -v '^{"event": "\(stopped\|resumed\)"' "$1" | sed -e 's/, "samples_per_s": [^,}]*//' -e 's/, "wall_s": [^,}]*//'
}
. "$(dirname "$0")/../support/same_state.sh"  # same_state A B OUT (the caller's $0)
