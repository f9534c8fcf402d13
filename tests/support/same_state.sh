# same_state A B OUT: every group of two checkpoints but /meta (creation time, wall time) is identical,
# attributes included; OUT gets the groups compared, or what differs. POSIX sh, sourced by the shell tests
# that compare a resumed run with an unbroken one (tests/train/signal_run_support.sh,
# tests/dist/train_dist_test.sh, tests/dist/two_host_test.sh).
same_state() {
  same_state_a=$(h5ls "$1" 2>/dev/null | awk '$2 == "Group" && $1 != "meta" { print $1 }' | sort | tr '\n' ' ')
  same_state_b=$(h5ls "$2" 2>/dev/null | awk '$2 == "Group" && $1 != "meta" { print $1 }' | sort | tr '\n' ' ')
  if [ -z "$same_state_a" ] || [ "$same_state_a" != "$same_state_b" ]; then
    echo "groups differ: '$same_state_a' vs '$same_state_b'" >"$3"
    return 1
  fi
  for same_state_g in $same_state_a; do
    h5diff "$1" "$2" "/$same_state_g" "/$same_state_g" >"$3" 2>&1 || { echo "(/$same_state_g)" >>"$3"; return 1; }
  done
  echo "$same_state_a" >"$3"
}
