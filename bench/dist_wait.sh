#!/bin/bash
# How ranks wait in MPI collectives (issue 34), two or more builds of mantissa-train side by side:
# (1) the step time of 2 ranks (mpirun -np 2) training the MLP 784-1024-1024-10 on synthetic data, fp16,
#     batch 64 per rank, 150 steps, 1 thread per rank: per run the median and the 10th percentile of steps
#     11-150 (from the metrics' samples_per_s of the global batch of 128); ROUNDS rounds that interleave the
#     builds, since this machine's load comes and goes;
# (2) the CPU time of rank 0 (utime + stime, all threads) in the 8 s after rank 1 is SIGSTOPped, while it
#     waits in a collective (--dist_timeout=10), 3 runs per build, interleaved.
#   bench/dist_wait.sh ROUNDS PROG...
set -u
rounds=$1
shift
w=$(mktemp -d "${TMPDIR:-/tmp}/dist_wait.XXXXXX")
trap 'rm -rf "$w"' EXIT
export OMP_WAIT_POLICY=passive
mpi() { mpirun --allow-run-as-root --oversubscribe -np 2 "$@"; }
for r in $(seq "$rounds"); do
  for prog in "$@"; do
    mpi "$prog" --data=synthetic --batch_size=64 --max_steps=150 --eval_every=100000 --eval_batches=1 \
      --progress=none --threads=1 --metrics="$w/m.jsonl" >/dev/null 2>&1 || echo "$prog failed"
    grep '^{"step"' "$w/m.jsonl" | sed 's/.*"samples_per_s": \([0-9.e+-]*\).*/\1/' | tail -n +11 |
      awk '{ print 128000 / $1 }' | sort -g |
      awk -v p="$prog" -v r="$r" -v load="$(cut -d' ' -f1 /proc/loadavg)" '{ a[NR] = $1 }
        END { printf "step %s round %d: median %.2f ms, p10 %.2f ms (load %s)\n", p, r, a[int((NR + 1) / 2)], a[int(NR / 10) + 1], load }'
    rm -f "$w/m.jsonl"
  done
done
# The pid of rank R's program among mpirun's children and grandchildren.
rank_pid() {
  for p in $(pgrep -P "$1") $(for c in $(pgrep -P "$1"); do pgrep -P "$c"; done); do
    if [ "$(cat "/proc/$p/comm")" = "$(basename "$3" | cut -c1-15)" ] &&
       tr '\0' '\n' <"/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
for r in 1 2 3; do
  for prog in "$@"; do
    mpi "$prog" --data=synthetic --mlp_hidden=64,32 --batch_size=32 --max_steps=100000 --eval_every=100000 \
      --progress=none --threads=1 --precision=fp32 --dist_timeout=10 --metrics="$w/m.jsonl" >/dev/null 2>&1 &
    job=$!
    steps() { n=$(grep -c '^{"step"' "$w/m.jsonl" 2>/dev/null); echo "${n:-0}"; }
    while [ "$(steps)" -lt 3 ]; do sleep 0.1; done
    r0=$(rank_pid "$job" 0 "$prog") r1=$(rank_pid "$job" 1 "$prog")
    kill -STOP "$r1"
    a=$(ticks "$r0")
    sleep 8
    b=$(ticks "$r0")
    awk -v p="$prog" -v r="$r" -v a="$a" -v b="$b" -v hz="$(getconf CLK_TCK)" \
      'BEGIN { printf "wait %s run %d: rank 0 used %.2f s of CPU in 8 s of waiting\n", p, r, (b - a) / hz }'
    wait "$job"
    kill -CONT "$r1" 2>/dev/null
    rm -f "$w/m.jsonl"
  done
done
