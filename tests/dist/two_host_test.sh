#!/bin/bash
# Issue 34: mantissa-train on two "hosts": two network namespaces joined by a veth pair (10.231.0.1 and
# 10.231.0.2), Open MPI's rsh launcher pointed at `ip netns exec` instead of ssh, the ranks talking TCP only
# (--mca btl tcp,self). mpirun and rank 0 run in namespace A, Open MPI's orted and rank 1 in namespace B;
# the two share the filesystem (the checkpoint folder), as hosts with a shared filesystem do.
#   two_host_test.sh MPIRUN PATH/TO/mantissa-train MPI(ON|OFF) [all | bench]
# all (the ctest dist_two_host):
#   place:     rank 0's process is in namespace A, rank 1's in namespace B.
#   equal:     30 steps of the MLP on synthetic data, Adam, fp32 and fp16: the metrics lines (timing fields
#              removed) and the final checkpoint (h5diff of every group but /meta) are bit for bit those of
#              the same 2-rank run on one host (shared memory). Prints the median step time of both.
#   partition: the link goes down mid-run (--dist_timeout=5): both ranks stop within 30 s with the line
#              naming the collective and "timed out", and exit. Open MPI 4.1's mpirun and orted then wait
#              for each other over the dead link: (heal) with the kernel's defaults they wait until the link
#              comes back (here after the ranks are gone), then mpirun exits non-zero within 30 s; (noheal)
#              with net.ipv4.tcp_retries2=3 in both namespaces (the kernel gives a dead TCP connection up
#              after a few seconds instead of about 15 minutes) mpirun exits non-zero on its own, within 60 s
#              of the partition. Either way nothing of the job is left in either namespace.
#   kill:      SIGKILL of rank 1 (in namespace B) mid-run with --checkpoint_every: mpirun exits non-zero
#              within 30 s, nothing left; --resume=auto on the two hosts then ends bit for bit like the
#              unbroken two-host run (metrics lines and final checkpoint).
# bench: the median step time over the veth against one host (shared memory, and TCP over loopback), two
#   small MLPs, three rounds (bench/RESULTS.md).
# Exit 77 (skipped, with the reason) without MPI, as a non-root user, or where `ip netns add` is refused
# (a container without CAP_NET_ADMIN / CAP_SYS_ADMIN). Needs iproute2 (scripts/install-deps.sh installs it):
# without `ip` it skips, except under CI=true, where that fails.
set -u
mpirun=${1:?usage: two_host_test.sh MPIRUN PROG MPI [all|bench]} prog=${2:?PROG} mpi_built=${3:?MPI} mode=${4:-all}
skip() { echo "SKIPPED: $*"; exit 77; }
case $mode in all | bench) ;; *) echo "two_host_test.sh: unknown mode '$mode' (all | bench)" >&2; exit 2 ;; esac
case $mpi_built in ON | on | 1 | TRUE | true | YES | yes) ;; *) skip "mantissa was built without MPI (MANTISSA_MPI=$mpi_built)" ;; esac
command -v "$mpirun" >/dev/null 2>&1 || skip "no mpirun ('$mpirun')"
[ -x "$prog" ] || { echo "FAILED: no program $prog"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create network namespaces (ip netns add); run as root"
if ! command -v ip >/dev/null 2>&1; then
  [ "${CI:-}" = true ] && { echo "FAILED: no 'ip' (iproute2), which scripts/install-deps.sh installs"; exit 1; }
  skip "no 'ip' command (Debian package iproute2: scripts/install-deps.sh installs it)"
fi
for tool in h5diff h5ls; do
  command -v "$tool" >/dev/null 2>&1 || { echo "FAILED: no $tool (Debian package hdf5-tools)"; exit 1; }
done

# Namespaces of a run of this test killed before its trap ran (ctest's timeout kills with SIGKILL): named
# after a process id that is gone. Their processes are killed and the namespaces deleted.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(mt2h-[ab]-[0-9]*\).*/\1/p'); do
  kill -0 "${ns##*-}" 2>/dev/null && continue
  # shellcheck disable=SC2046
  kill -KILL $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null
  ip netns del "$ns" 2>/dev/null
done

ns_a=mt2h-a-$$ ns_b=mt2h-b-$$
# The veth pair is created in this namespace, which clean rooms (their own process ids) may share: a random
# name, at most 15 characters.
tag=$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')
veth_a=mt2ha$tag veth_b=mt2hb$tag
ip_a=10.231.0.1 ip_b=10.231.0.2 net=10.231.0.0/24
work=$(mktemp -d "${TMPDIR:-/tmp}/two_host_test.XXXXXX")
# Every process left in the namespaces (only this test's job runs there) is killed, then the namespaces
# deleted, which deletes the veth pair.
cleanup() {
  for ns in "$ns_a" "$ns_b"; do
    # shellcheck disable=SC2046
    kill -KILL $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null
  done
  sleep 0.2
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  if [ -n "${TWO_HOST_TEST_KEEP:-}" ]; then echo "kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if ! err=$(ip netns add "$ns_a" 2>&1); then
  skip "cannot create a network namespace here (ip netns add: $err); a container needs CAP_NET_ADMIN and CAP_SYS_ADMIN"
fi
if ! { ip netns add "$ns_b" && ip link add "$veth_a" type veth peer name "$veth_b" &&
       ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b" &&
       ip -n "$ns_a" addr add "$ip_a/24" dev "$veth_a" && ip -n "$ns_b" addr add "$ip_b/24" dev "$veth_b" &&
       ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
       ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up; } 2>"$work/setup.err"; then
  skip "cannot set up two namespaces joined by a veth pair ($(head -1 "$work/setup.err"); veth needs the kernel's veth module)"
fi
if ! ip netns exec "$ns_a" true 2>"$work/exec.err"; then
  skip "ip netns exec is refused here: $(head -1 "$work/exec.err")"
fi

# Open MPI's rsh launcher runs `AGENT HOST COMMAND...` to start its daemon (orted) on HOST, as it would run
# ssh: here the command runs in HOST's namespace, with this environment (PATH, OMP_*), as ssh would not.
cat >"$work/agent.sh" <<END_OF_AGENT
#!/bin/sh
host=\$1
shift
case \$host in
  $ip_a) ns=$ns_a ;;
  $ip_b) ns=$ns_b ;;
  *) echo "two_host_test agent: unknown host '\$host' (want $ip_a or $ip_b)" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
END_OF_AGENT
chmod +x "$work/agent.sh"

failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# mpirun in namespace A, one slot on each host: rank 0 on A (started by mpirun itself), rank 1 on B.
# --bind-to none: each "host" would bind its one rank to its first core, the same core of this machine for
# both (the step took twice as long).
two_hosts() {
  ip netns exec "$ns_a" "$mpirun" --allow-run-as-root --oversubscribe --bind-to none --mca plm_rsh_agent "$work/agent.sh" \
    --host "$ip_a,$ip_b" -np 2 --mca btl tcp,self --mca oob_tcp_if_include "$net" --mca btl_tcp_if_include "$net" "$@"
}
one_host() { "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$@"; }
one_host_tcp() { "$mpirun" --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self "$@"; }
# The names of the processes in namespace NS, and the pids of those named NAME (no procps in the clean room).
left_in() { for p in $(ip netns pids "$1" 2>/dev/null); do printf '%s ' "$(cat "/proc/$p/comm" 2>/dev/null)"; done; }
pid_in() { for p in $(ip netns pids "$1" 2>/dev/null); do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ] && echo "$p"; done; }
now() { date +%s.%N; }
# net.ipv4.tcp_retries2 in both namespaces (per namespace; written through /proc: no sysctl in the room).
retries2() {
  for ns in "$ns_a" "$ns_b"; do
    ip netns exec "$ns" sh -c "echo $1 >/proc/sys/net/ipv4/tcp_retries2"
    [ "$(ip netns exec "$ns" cat /proc/sys/net/ipv4/tcp_retries2)" = "$1" ] || fail "cannot set tcp_retries2 to $1 in $ns"
  done
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
normalized() {  # metrics lines without timing fields and stop/resume events
  grep -v '^{"event": "\(stopped\|resumed\|summary\)"' "$1" | sed -e 's/, "samples_per_s": [^,}]*//' -e 's/, "wall_s": [^,}]*//'
}
# The median step time in ms over the step lines after the first: global batch / samples_per_s.
step_ms() {  # step_ms METRICS GLOBAL_BATCH
  sed -n 's/^{"step": \([0-9]*\),.*"samples_per_s": \([0-9.e+]*\).*/\1 \2/p' "$1" | awk -v b="$2" '$1 > 1 { print 1000 * b / $2 }' |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else printf "%.3f", v[int((NR + 1) / 2)] }'
}
. "$(dirname "$0")/../support/same_state.sh"  # same_state A B OUT
# A watchdog: a hang must not hang the test (its output goes nowhere, so that ctest does not wait for it).
# fired() says whether it killed the job (mpirun's own status is 137 when a rank was SIGKILLed);
# end_watchdog ends it and its sleep.
watch_job() {  # watch_job PID SECONDS
  rm -f "$work/fired"
  ( trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep "$2" & s=$!
    wait "$s" && touch "$work/fired" && kill -KILL "$1" ) </dev/null >/dev/null 2>&1 &
  watchdog=$!
}
fired() { [ -e "$work/fired" ]; }
end_watchdog() { kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null; }
last_step() { tail -n 3 "$1" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p' | tail -1 | grep . || echo 0; }
# Waits until the job's metrics reach step STEP (at most 60 s); false if the job ended first.
wait_step() {  # wait_step JOB METRICS STEP
  i=0
  while [ "$(last_step "$2")" -lt "$3" ]; do
    kill -0 "$1" 2>/dev/null && [ $i -lt 600 ] || return 1
    sleep 0.1; i=$((i + 1))
  done
}
small="--data=synthetic --mlp_hidden=64,32 --batch_size=32 --eval_every=25 --eval_batches=4 --progress=none --threads=1"

if [ "$mode" = bench ]; then
  # The median step time (fp32 Adam) on one host (shared memory), one host over TCP (loopback) and the two
  # namespaces (veth), three rounds: the MLP 784-64-32-10 (52,650 parameters, 2000 steps) and 784-256-256-10
  # (269,322 parameters, 500 steps).
  for round in 1 2 3; do
    for model in "--mlp_hidden=64,32 --max_steps=2000" "--mlp_hidden=256,256 --max_steps=500"; do
      args="--data=synthetic $model --batch_size=32 --epochs=0 --eval_every=100000 --eval_batches=1"
      args="$args --progress=none --threads=1 --optimizer=adam"
      line="bench round $round ${model%% *}:"
      for where in one_host one_host_tcp two_hosts; do
        # shellcheck disable=SC2086
        $where "$prog" $args --metrics="$work/bench.jsonl" >"$work/bench.out" 2>&1 || { fail "bench $where"; tail "$work/bench.out"; }
        line="$line $where $(step_ms "$work/bench.jsonl" 64) ms;"
      done
      echo "$line load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
  exit "$((failures > 0))"
fi

# --- place: which rank runs where ---
# shellcheck disable=SC2016  # expanded by each rank's shell
two_hosts sh -c 'echo "rank $OMPI_COMM_WORLD_RANK $(readlink /proc/self/ns/net)"' >"$work/place.out" 2>&1
want="rank 0 $(ip netns exec "$ns_a" readlink /proc/self/ns/net) rank 1 $(ip netns exec "$ns_b" readlink /proc/self/ns/net)"
got=$(grep '^rank [01] ' "$work/place.out" | sort | tr '\n' ' ' | sed 's/ $//')
if [ "$got" != "$want" ]; then
  fail "place: want '$want', got:"; cat "$work/place.out"
  echo "$failures failure(s)"; exit 1
fi
echo "ok: place: rank 0 in namespace $ns_a ($ip_a, with mpirun), rank 1 in $ns_b ($ip_b, under orted started through ip netns exec)"

# --- equal: two hosts over TCP against one host, bit for bit ---
for precision in fp32 fp16; do
  args="$small --precision=$precision --optimizer=adam --max_steps=30"
  d="$work/equal-$precision"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  if ! one_host "$prog" $args --checkpoint_dir="$d/one" --metrics="$d/one.jsonl" >"$d.one.out" 2>&1; then
    fail "equal $precision: the one-host run failed:"; tail -10 "$d.one.out"; continue
  fi
  # shellcheck disable=SC2086
  if ! two_hosts "$prog" $args --checkpoint_dir="$d/two" --metrics="$d/two.jsonl" >"$d.two.out" 2>&1; then
    fail "equal $precision: the two-host run failed:"; tail -10 "$d.two.out"; continue
  fi
  normalized "$d/one.jsonl" >"$d.one.norm"
  normalized "$d/two.jsonl" >"$d.two.norm"
  if [ "$(grep -c '^{"step"' "$d.one.norm")" -ne 30 ] || ! cmp -s "$d.one.norm" "$d.two.norm"; then
    fail "equal $precision: the metrics lines differ (or are not 30 steps):"; diff "$d.one.norm" "$d.two.norm" | head -6
  elif ! same_state "$d/one/step_30.h5" "$d/two/step_30.h5" "$d.h5diff"; then
    fail "equal $precision: the final checkpoints differ:"; head -8 "$d.h5diff"
  else
    echo "ok: equal $precision: 30 steps over TCP between the namespaces = one host, bit for bit: $(grep -c . "$d.two.norm")" \
      "metrics lines, final checkpoint groups $(cat "$d.h5diff")identical; median step $(step_ms "$d/two.jsonl" 64) ms" \
      "(one host: $(step_ms "$d/one.jsonl" 64) ms)"
  fi
done

# --- partition: the veth link goes down in the middle of a run ---
long="$small --epochs=0 --max_steps=1000000 --eval_every=1000000 --precision=fp32 --optimizer=adam --dist_timeout=5"
for how in heal noheal; do
  c="$work/partition-$how"
  retries=15  # the kernel's default: a dead connection is given up after about 15 minutes
  [ "$how" = noheal ] && retries=3
  retries2 "$retries"
  # shellcheck disable=SC2086
  two_hosts "$prog" $long --metrics="$c.jsonl" >"$c.out" 2>&1 &
  job=$!
  watch_job "$job" 120
  if ! wait_step "$job" "$c.jsonl" 50; then
    fail "partition $how: the run did not reach step 50:"; end_watchdog; tail -10 "$c.out"; wait "$job"; continue
  fi
  ip -n "$ns_b" link set "$veth_b" down
  t0=$(now)
  at=$(last_step "$c.jsonl")
  # Both ranks must end (their --dist_timeout is 5 s) within 30 s.
  i=0
  while [ -n "$(pid_in "$ns_a" mantissa-train)$(pid_in "$ns_b" mantissa-train)" ] && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i + 1))
  done
  ranks_gone=$(since "$t0")
  ranks_left=$(pid_in "$ns_a" mantissa-train)$(pid_in "$ns_b" mantissa-train)
  mpirun_then=running
  kill -0 "$job" 2>/dev/null || mpirun_then=ended
  if [ "$how" = heal ]; then
    ip -n "$ns_b" link set "$veth_b" up
    t1=$(now)
  fi
  wait "$job"
  rc=$?
  end_watchdog
  took=$(since "$t0")
  [ "$how" = heal ] && healed=$(since "$t1")
  # Open MPI's daemon in namespace B (orted) may outlive mpirun until its own connection to mpirun fails.
  t2=$(now)
  i=0
  while [ -n "$(left_in "$ns_a")$(left_in "$ns_b")" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  emptied=$(since "$t2")
  left="$(left_in "$ns_a")$(left_in "$ns_b")"
  [ "$how" = noheal ] && ip -n "$ns_b" link set "$veth_b" up
  said=$(grep -m1 -E '^mantissa-train: rank 0: [a-z_]+.* waited 5000 ms and the other ranks did not join \(timed out\)' "$c.out")
  if [ -n "$ranks_left" ]; then
    fail "partition $how: a rank still ran $ranks_gone s after the link went down (--dist_timeout=5)"; tail -10 "$c.out"
  elif [ -z "$said" ]; then
    fail "partition $how: no line from rank 0 naming the collective and 'timed out':"; tail -20 "$c.out"
  elif [ "$rc" -eq 0 ] || fired; then
    fail "partition $how: mpirun's status is $rc after $took s (want non-zero, not killed by the watchdog)"; tail -20 "$c.out"
  elif [ "$how" = heal ] && awk -v t="$healed" 'BEGIN { exit !(t > 30) }'; then
    fail "partition heal: mpirun ended $healed s after the link came back (want within 30 s)"
  elif [ "$how" = noheal ] && awk -v t="$took" 'BEGIN { exit !(t > 60) }'; then
    fail "partition noheal: mpirun ended $took s after the partition (want within 60 s)"
  elif [ -n "$left" ]; then
    fail "partition $how: still running in the namespaces 30 s after mpirun ended: $left"
  else
    case $how in
      heal) what="mpirun $mpirun_then when the ranks had ended; the link back up after $ranks_gone s, mpirun exited $rc $healed s later" ;;
      noheal) what="mpirun exited $rc on its own $took s after the partition (tcp_retries2=3)" ;;
    esac
    echo "ok: partition $how at step $at: both ranks ended $ranks_gone s after the link went down; $what;" \
      "nothing left $emptied s after mpirun; rank 0: $(echo "$said" | cut -c1-150)"
  fi
done
retries2 15

# --- kill: SIGKILL of the rank on the other host, then a bit-exact resume on the two hosts ---
k="$work/kill"
mkdir -p "$k"
total=3000  # about 3 s on two hosts
args="$small --epochs=0 --max_steps=$total --eval_every=1000 --precision=fp16 --optimizer=adam --checkpoint_every=250"
# shellcheck disable=SC2086
if ! two_hosts "$prog" $args --checkpoint_dir="$k/full" --metrics="$k/full.jsonl" >"$k/full.out" 2>&1; then
  fail "kill: the unbroken two-host run failed:"; tail -10 "$k/full.out"
else
  # shellcheck disable=SC2086
  two_hosts "$prog" $args --checkpoint_dir="$k/ckpt" --metrics="$k/m.jsonl" >"$k/out" 2>&1 &
  job=$!
  watch_job "$job" 120
  victim=""
  if wait_step "$job" "$k/m.jsonl" 800; then victim=$(pid_in "$ns_b" mantissa-train); fi
  if [ -z "$victim" ]; then
    fail "kill: no rank-1 mantissa-train in $ns_b at step 800 (or the run ended first):"; tail -10 "$k/out"
    kill -KILL "$job" 2>/dev/null; wait "$job"; end_watchdog
  else
    at=$(last_step "$k/m.jsonl")
    kill -KILL "$victim"
    t0=$(now)
    wait "$job"
    rc=$?
    took=$(since "$t0")
    end_watchdog
    sleep 0.5
    left="$(left_in "$ns_a")$(left_in "$ns_b")"
    step=$(sed -n 's/^step_\([0-9]*\)\.h5$/\1/p' "$k/ckpt/latest" 2>/dev/null)
    if [ "$rc" -eq 0 ] || fired || awk -v t="$took" 'BEGIN { exit !(t > 30) }'; then
      fail "kill: mpirun's status $rc after $took s (want non-zero within 30 s)"; tail -10 "$k/out"
    elif [ -n "$left" ]; then
      fail "kill: still running in the namespaces after mpirun ended: $left"
    elif [ -z "$step" ] || [ "$step" -ge "$total" ]; then
      fail "kill: latest checkpoint '$step' (want one before step $total)"
    elif ! grep -q 'signal 9' "$k/out"; then
      fail "kill: mpirun did not say that rank 1 was killed (signal 9):"; tail -10 "$k/out"
    else
      echo "ok: kill: rank 1 SIGKILLed at step $at on $ip_b: mpirun exited $rc after $took s, nothing left;" \
        "latest checkpoint step $step; $(grep -m1 'signal 9' "$k/out" | sed 's/^ *//')"
      # shellcheck disable=SC2086
      if ! two_hosts "$prog" $args --checkpoint_dir="$k/ckpt" --resume=auto --metrics="$k/m.jsonl" >"$k/resume.out" 2>&1 ||
         ! grep -q "^resumed at step $step\$" "$k/resume.out"; then
        fail "kill: the two hosts did not resume at step $step (--resume=auto):"; tail -10 "$k/resume.out"
      else
        normalized "$k/full.jsonl" >"$k/full.norm"
        normalized "$k/m.jsonl" >"$k/m.norm"
        if ! same_state "$k/full/step_$total.h5" "$k/ckpt/step_$total.h5" "$k/h5diff"; then
          fail "kill: the resumed run's final checkpoint differs from the unbroken run's:"; head -8 "$k/h5diff"
        elif [ "$(grep -c '^{"step"' "$k/full.norm")" -ne "$total" ] || ! cmp -s "$k/full.norm" "$k/m.norm"; then
          fail "kill: the resumed run's metrics lines differ from the unbroken run's:"; diff "$k/full.norm" "$k/m.norm" | head -6
        else
          echo "ok: kill: --resume=auto on the two hosts from step $step to $total: final checkpoint groups" \
            "$(cat "$k/h5diff")and $(grep -c . "$k/m.norm") metrics lines identical to the unbroken run's"
        fi
      fi
    fi
  fi
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
