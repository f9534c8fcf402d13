#!/bin/bash
# A checkpoint that does not fit on the disk: mantissa-train stops with exit 1 and a message a user can act
# on (which file, "no space left on device", how much is free), and nothing is lost: `latest` still names
# the previous checkpoint, which loads and trains on, and no partial file is left in the folder.
#   disk_full_test.sh PATH/TO/mantissa-train
# The full disk is a tmpfs sized for two checkpoints, mounted in a private mount namespace (unshare: as
# root, or as a user mapped to root where user namespaces are allowed). Exit 77 (skipped) where neither is.
set -u
prog=$1

if [ -z "${DISK_FULL_TEST_INSIDE:-}" ]; then
  for how in "--mount" "--user --map-root-user --mount"; do
    # shellcheck disable=SC2086  # $how is a list of flags
    if unshare $how true 2>/dev/null; then
      DISK_FULL_TEST_INSIDE=1 exec unshare $how bash "$0" "$@"
    fi
  done
  echo "SKIPPED: no private mount namespace here (unshare --mount refused, as root and as a mapped user)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/disk_full_test.XXXXXX")
trap 'umount "$work/small" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; [ -f "$work/run.out" ] && cat "$work/run.out"; exit 1; }
common=(--data=synthetic --mlp_hidden=256 --batch_size=64 --eval_every=100000 --eval_batches=1 --progress=none
        --threads=1 --checkpoint_every=10)

# The size of one checkpoint of this run, measured on the real disk, sizes the small one: room for two.
"$prog" "${common[@]}" --max_steps=10 --checkpoint_dir="$work/measure" >"$work/run.out" 2>&1 ||
  fail "the measuring run"
bytes=$(stat -c %s "$work/measure/step_10.h5")
mkdir "$work/small"
mount -t tmpfs -o size=$((bytes * 5 / 2)) tmpfs "$work/small" ||
  { echo "SKIPPED: cannot mount a tmpfs in the namespace"; exit 77; }
dir=$work/small/run

"$prog" "${common[@]}" --max_steps=40 --checkpoint_dir="$dir" >"$work/run.out" 2>&1
status=$?
[ "$status" -eq 1 ] || fail "exit status $status on a full disk, expected 1"
expect() { grep -qF -- "$1" "$work/run.out" || fail "the message lacks '$1'"; }
expect "mantissa-train: cannot write the checkpoint $dir/step_30.h5: no space left on device ("
expect "MiB free in $dir)"
expect "Nothing is lost: $dir/latest still names step_20.h5, which is intact"
expect "no partial file is left"
if grep -q "bytes actually written\|HDF5" "$work/run.out"; then fail "HDF5's raw message reached the user"; fi

[ "$(cat "$dir/latest")" = "step_20.h5" ] || fail "latest names '$(cat "$dir/latest")', expected step_20.h5"
left=$(ls -A "$dir" | tr '\n' ' ')
[ "$left" = "latest step_10.h5 step_20.h5 " ] || fail "the folder holds '$left' (a partial file left behind?)"

# The previous checkpoint is whole: a run resumes from it (the loader checks its checksum) and trains on.
"$prog" "${common[@]}" --max_steps=21 --resume="$dir/step_20.h5" --checkpoint_dir="$work/after" \
  >"$work/run.out" 2>&1 || fail "resuming from step_20.h5"
expect "resumed at step 20"
[ "$(cat "$work/after/latest")" = "step_21.h5" ] || fail "the resumed run did not checkpoint step 21"
echo "PASSED: a full disk stops the run with a plain message; latest and step_20.h5 intact, nothing partial left"
