#!/bin/sh
# mantissa-train under mpirun (issue 8), end to end.
# Usage: train_dist_test.sh MPIRUN PATH/TO/mantissa-train [follow | resume | signal | ranks | agree | all] (default all)
#   follow: 2 ranks with --batch_size=B log the same losses (the mean over the ranks) and evaluation losses
#           as one process with 2B, for 50 steps, SGD and Adam, fp32 and fp16 (and with accumulation, the
#           GPT, 10 steps of the CNN with --batchnorm=sync, and two rungs of issue 36's precision ladder),
#           within float32 tolerance (fp16 and the ladder's bf16 weights: see below);
#           only rank 0 prints.
#   resume: 2 ranks resume from the checkpoint rank 0 wrote and log the same losses and scales, bit for bit,
#           as the unbroken 2-rank run; their final checkpoints' /model groups are identical (h5diff).
#   stop:   one rank stopped (SIGSTOP) mid-run: the other times out (--dist_timeout=3) and the job ends with
#           a non-zero status and the message within 30 s.  kill: one rank SIGKILLed ends the job likewise.
#   (mode "resume" runs resume, stop and kill: ctest runs the two halves as two tests.) In "stop", the
#           waiting rank must not spin a core: under 0.5 s of CPU in 2 s of waiting (it took 1.99 s before).
#   ranks:  issue 34: a run stopped at step N on 2 ranks and resumed on 1 or 3 (and 1 -> 2) keeps its global
#           batch (--global_batch splits itself; --batch_size is set by hand) and follows the unbroken run
#           (losses, evaluations within the tolerances measured below; steps, epochs, lr, scales and skips
#           equal; one metrics file), also with --grad_accum=2 on 1 rank; 3 ranks' padded end of the epoch is
#           seen; a global batch the new ranks cannot split, or a --batch_size that does not fit, exits 2 with
#           one line and the checkpoint folder unchanged.
#   agree:  issue 34: ranks started differently (mpirun's MPMD form, `-np 1 A : -np 1 B`) stop before their
#           first collective with one line on rank 0 that names what differs and which rank holds what, and
#           every rank exits 2 (1 for a checkpoint it cannot read), with no crash and no MPI abort: another
#           --lr, --mlp_hidden or --precision; the GPT on texts with different vocabularies (the flags agree,
#           the parameters do not); --resume=auto where only rank 0 sees a checkpoint, where the ranks see
#           different steps, and where rank 1's `latest` names a missing file; and ranks with their own
#           copies of the checkpoint in their own --checkpoint_dir resume together, and 2 ranks train with
#           --collective_check=shapes.
#   zero:   issue 34's ZeRO-1 (--zero=1): 2 and 3 ranks train bit for bit like plain data parallelism
#           (every logged loss, norm and scale; the final checkpoint's /model and /optimizer, h5diff), the
#           MLP in fp16 with clipping and bf16 and under two rungs of the precision ladder, the GPT in fp32 with AdamW, clipping and gradient histograms;
#           a plain run's checkpoint resumes under --zero=1 and a ZeRO-1 one under --zero=0, both ending
#           bit for bit like the unbroken run; --zero=2 is refused with one line and exit 2. (Resuming on
#           another number of ranks under --zero=1: mode `ranks`.)
#   signal: issue 15's stop under mpirun. (a) SIGUSR1 to rank 1 alone: both ranks stop after the same step
#           and exit 75 (seen through a wrapper that records each rank's status), mpirun's status is 75;
#           (b) SIGUSR1 to mpirun, which forwards it to the ranks at once: mpirun's status is 75;
#           (c) SIGTERM to mpirun: Open MPI 4.1's mpirun sends the ranks SIGCONT, SIGTERM a second later
#           (odls_base_sigkill_timeout, default 1 s) and SIGKILL after another second, and exits 1 whatever the
#           ranks do: they stop within that second (rank 0's checkpoint and "stopped" line) and are killed
#           in MPI_Finalize, which cannot finish while mpirun is ending the job; no rank may be left running.
#           In both: rank 0 alone writes the one checkpoint (step_N.h5 and `latest` only in the folder) and the
#           "stopped" line, the message names step N; then 2 ranks resume (--resume=latest, then auto) and
#           end bit for bit like the unbroken 2-rank run: final checkpoint (h5diff of every group but /meta)
#           and metrics lines (timing fields removed, stopped/resumed events left out).
set -u
mpirun=$1 prog=$2 mode=${3:-all}  # mode: follow | resume | signal | ranks | agree | zero | all
want() { [ "$mode" = all ] || [ "$mode" = "$1" ]; }
work=$(mktemp -d "${TMPDIR:-/tmp}/train_dist_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# --allow-run-as-root: CI containers run as root; --oversubscribe: more ranks than cores is fine here.
mpi() { "$mpirun" --allow-run-as-root --oversubscribe -np "$@"; }
common="--data=synthetic --mlp_hidden=64,32 --eval_every=25 --eval_batches=4 --progress=lines --threads=1"
# step loss scale skipped, one line per step; eval: step loss
steps_of() { grep '^{"step"' "$1" | sed 's/^{"step": \([0-9]*\), "epoch": [0-9]*, "loss": \([^,]*\),.*"scale": \([^,]*\), "skipped": \([a-z]*\),.*/\1 \2 \3 \4/'; }
evals_of() { grep '^{"event": "eval"' "$1" | sed 's/^{"event": "eval", "step": \([0-9]*\), "epoch": [0-9]*, "loss": \([^,}]*\).*/\1 \2/'; }

# Compares column 2 of two "step value ..." files: same steps, |a - b| <= tol * |a|; other columns equal.
# Prints the worst relative difference.
compare() {  # compare A B TOL
  awk -v tol="$3" 'NR == FNR { v[$1] = $2; rest[$1] = $3 " " $4; n++; next }
    { if (!($1 in v)) { print "step " $1 " missing"; bad = 1; next }
      d = v[$1] - $2; if (d < 0) d = -d; a = v[$1]; if (a < 0) a = -a; r = a > 0 ? d / a : d
      if (r > worst) worst = r
      if (r > tol || rest[$1] != $3 " " $4) { print "step " $1 ": " v[$1] " " rest[$1] " vs " $2 " " $3 " " $4; bad = 1 }
      m++ }
    END { if (n == 0 || m != n) { print m " of " n " lines"; bad = 1 } printf "worst relative difference %.3g\n", worst; exit bad }' "$1" "$2"
}

# --- follow: 2 ranks x B against 1 x 2B ---
# follow NAME TOL ONE-PROCESS-FLAGS TWO-RANK-FLAGS: 50 steps each unless the flags say otherwise (common
# flags, model and precision in both); the step-1 loss (the same weights, before any update) must agree to
# 1e-6 whatever the precision, which a wrong shard or a loss not averaged over the ranks would break.
follow() {
  name=$1 tol=$2 one=$3 two=$4
  # shellcheck disable=SC2086
  "$prog" $common --max_steps=50 $one --metrics="$work/$name-1.jsonl" >"$work/$name-1.out" 2>&1 ||
    { fail "$name: one process failed"; cat "$work/$name-1.out"; return; }
  # shellcheck disable=SC2086
  mpi 2 "$prog" $common --max_steps=50 $two --metrics="$work/$name-2.jsonl" >"$work/$name-2.out" 2>&1 ||
    { fail "$name: 2 ranks failed"; cat "$work/$name-2.out"; return; }
  steps_of "$work/$name-1.jsonl" >"$work/$name-1.txt"
  steps_of "$work/$name-2.jsonl" >"$work/$name-2.txt"
  evals_of "$work/$name-1.jsonl" >"$work/$name-1.eval"
  evals_of "$work/$name-2.jsonl" >"$work/$name-2.eval"
  head -1 "$work/$name-1.txt" >"$work/$name-1.first"
  head -1 "$work/$name-2.txt" >"$work/$name-2.first"
  if ! first=$(compare "$work/$name-1.first" "$work/$name-2.first" 1e-6); then fail "$name step 1: $first"
  elif ! result=$(compare "$work/$name-1.txt" "$work/$name-2.txt" "$tol"); then fail "$name losses: $result"
  elif ! eresult=$(compare "$work/$name-1.eval" "$work/$name-2.eval" "$tol"); then fail "$name eval: $eresult"
  elif [ "$(grep -c 'run summary' "$work/$name-2.out")" -ne 1 ] || ! grep -q 'per rank x 2 ranks' "$work/$name-2.out"; then
    fail "$name: rank 0 alone must print (one summary, the batch per rank):"; cat "$work/$name-2.out"
  else echo "ok: $name: 2 ranks follow one process for $(wc -l <"$work/$name-1.txt") steps, losses: $result; eval: $eresult"; fi
}
# Tolerances (worst relative difference of the losses over 50 steps and of the 2 evaluations), measured:
#   fp32: each rank's grads are sums over 32 rows, halved and added, instead of one sum over 64 rows: a
#   few ulps per step, carried by the weights: measured 5.2e-8 (SGD, Adam; evaluations equal to 9 digits).
#   1e-5 is headroom for rounding only: a grad not averaged over the ranks moves SGD's loss by 1e-2.
#   fp16: each rank's weight grads leave the f16 GEMM rounded to f16 (2^-11 relative) before the
#   reduction, instead of once for the whole batch; Adam turns a rounding-size change of a near-zero grad
#   into a step of about lr. Measured: SGD 3.6e-5, Adam 2.5e-4 (lr 1e-3; 9e-3 at lr 1e-2). 1e-3.
if want follow; then
for precision in fp32 fp16; do
  tol=1e-5
  [ "$precision" = fp16 ] && tol=1e-3
  # SGD at lr 1e-2 so that the weights move; Adam at its default 1e-3.
  for opt in "sgd --lr=0.01" "adam --lr=0.001"; do
    flags="--precision=$precision --optimizer=$opt"
    follow "$precision-${opt%% *}" "$tol" "$flags --batch_size=64" "$flags --batch_size=32"
  done
done
# Accumulation: 2 micro-batches of 16 per rank (the first under no_sync) make the same step as 1 x 64.
follow fp32-sgd-accum 1e-5 "--precision=fp32 --optimizer=sgd --lr=0.01 --batch_size=64" \
  "--precision=fp32 --optimizer=sgd --lr=0.01 --batch_size=16 --grad_accum=2"
# Issue 36's precision ladder: bf16 weights (their grads widened into the f32 buckets, averaged, rounded back
# once) with 8-bit moments, stochastic rounding with SGD (which a grad not averaged over the ranks would move by
# 1e-2) and Kahan with Adam. Each rank's bf16 grads are rounded before the reduction, and the weights round to
# bf16 every step. Measured: SGD 1.0e-4, Adam 7.3e-4.
ladder="--precision=bf16 --master_weights=none --optimizer_state=8bit"
follow ladder-stochastic-sgd 1e-3 "$ladder --update_rounding=stochastic --optimizer=sgd --lr=0.01 --batch_size=64" \
  "$ladder --update_rounding=stochastic --optimizer=sgd --lr=0.01 --batch_size=32"
follow ladder-kahan-adam 3e-3 "$ladder --update_rounding=kahan --optimizer=adam --batch_size=64" \
  "$ladder --update_rounding=kahan --optimizer=adam --batch_size=32"
# A small GPT on synthetic tokens: every parameter is reduced, the evaluation split among the ranks.
gpt="--model=gpt --n_layer=1 --n_embd=32 --block_size=16 --sample_chars=0 --precision=fp32 --optimizer=adam"
follow gpt-fp32-adam 1e-5 "$gpt --batch_size=8" "$gpt --batch_size=4"
# The CNN's BatchNorm with the statistics of the global batch (SyncBatchNorm): 10 steps, an evaluation at
# step 5 and at the end (one batch of the test set per rank, with the running statistics). The one process
# runs with --batchnorm=sync too: in a world of one that is the same code with nothing to add in its
# all-reduce, so the runs differ only in how the batch is split, as for the models above (plain BatchNorm's
# fused kernel sums in another order: it agreed to 1e-7 as well). Measured: 1.0e-7 (losses), 0 (eval).
# With per-rank statistics (--batchnorm=local) step 1 already differs by 8.9e-5 and the evaluations by
# 1.1e-3 (they use rank 0's running statistics, gathered from its half of each batch).
cnn="--model=cnn --batchnorm=sync --precision=fp32 --optimizer=sgd --lr=0.01 --max_steps=10 --eval_every=5 --eval_batches=2"
follow cnn-syncbn-fp32-sgd 1e-5 "$cnn --batch_size=16" "$cnn --batch_size=8"
fi

if want resume; then
# --- resume: rank 0's checkpoint, resumed by 2 ranks ---
for precision in fp32 fp16; do
  d="$work/resume-$precision"
  mkdir -p "$d"
  args="$common --precision=$precision --optimizer=adam --batch_size=32"
  # shellcheck disable=SC2086
  if mpi 2 "$prog" $args --max_steps=40 --checkpoint_dir="$d/full" --metrics="$d/full.jsonl" >"$d.full.out" 2>&1 &&
     mpi 2 "$prog" $args --max_steps=17 --checkpoint_dir="$d/part" >"$d.first.out" 2>&1 &&
     mpi 2 "$prog" $args --max_steps=40 --checkpoint_dir="$d/part" --resume=latest --metrics="$d/resumed.jsonl" \
       >"$d.resumed.out" 2>&1; then
    steps_of "$d/full.jsonl" | awk '$1 > 17' >"$d.full.txt"
    steps_of "$d/resumed.jsonl" >"$d.resumed.txt"
    if [ ! -s "$d.resumed.txt" ] || ! cmp -s "$d.full.txt" "$d.resumed.txt"; then
      fail "resume $precision: steps 18-40 differ:"; diff "$d.full.txt" "$d.resumed.txt" | head -5
    elif ! h5diff "$d/full/step_40.h5" "$d/part/step_40.h5" /model /model >"$d.h5diff" 2>&1; then
      fail "resume $precision: final weights differ:"; head -5 "$d.h5diff"
    else echo "ok: resume $precision: 2 ranks from rank 0's step 17 checkpoint: $(wc -l <"$d.resumed.txt") steps identical, final /model identical"; fi
  else
    fail "resume $precision: a run failed"; cat "$d.full.out" "$d.first.out" "$d.resumed.out" 2>/dev/null | tail -20
  fi
done

# --- a rank stops or dies in the middle of a run ---
# The pid of the rank-1 process among the job's children and grandchildren (Open MPI's mpirun starts the
# ranks itself on one machine).
rank1_pid() {
  for p in $(pgrep -P "$1") $(for c in $(pgrep -P "$1"); do pgrep -P "$c"; done); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then echo "$p"; return; fi
  done
}
# The pid of rank R's program (not a wrapper) among the job's children and grandchildren.
rank_pid_env() {  # rank_pid_env JOB R
  for p in $(pgrep -P "$1") $(for c in $(pgrep -P "$1"); do pgrep -P "$c"; done); do
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$(basename "$prog" | cut -c1-15)" ] &&
       tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}
for case in "stop|STOP|timed out" "kill|KILL|signal 9"; do
  what=${case%%|*} rest=${case#*|}
  sig=${rest%%|*} expected=${rest#*|}
  # shellcheck disable=SC2086
  "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$prog" $common --precision=fp32 --batch_size=32 --max_steps=100000 --eval_every=100000 --dist_timeout=3 \
    --metrics="$work/$what.jsonl" >"$work/$what.out" 2>&1 &
  job=$!
  i=0
  while [ "$(cat "$work/$what.jsonl" 2>/dev/null | grep -c '^{"step"')" -lt 3 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  victim=$(rank1_pid "$job")
  if [ -z "$victim" ]; then fail "$what: no rank-1 process found"; kill "$job"; wait "$job"; continue; fi
  waiter=$(rank_pid_env "$job" 0)
  start=$(date +%s)
  kill -"$sig" "$victim"
  if [ "$what" = stop ] && [ -z "$waiter" ]; then fail "stop: no rank-0 process found"
  elif [ "$what" = stop ]; then
    # Rank 0 now waits in a collective for the stopped rank 1 (for --dist_timeout=3 s): its CPU time in
    # [0.5 s, 2.5 s] after the stop (utime + stime of all its threads, in clock ticks).
    sleep 0.5
    t0=$(awk '{ print $14 + $15 }' "/proc/$waiter/stat" 2>/dev/null)
    sleep 2
    t1=$(awk '{ print $14 + $15 }' "/proc/$waiter/stat" 2>/dev/null)
    cpu=$(awk -v a="${t0:-0}" -v b="${t1:-0}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz }')
    if [ -z "$t1" ] || awk -v c="$cpu" 'BEGIN { exit !(c >= 0.5) }'; then
      fail "stop: rank 0 used ${cpu} s of CPU in 2 s of waiting for the stopped rank 1 (want < 0.5 s)"
    else echo "ok: stop: rank 0 used ${cpu} s of CPU in 2 s of waiting for the stopped rank 1"; fi
  fi
  # Watchdog: a hang must not hang the test.
  # Its output goes nowhere, so that ctest does not wait for its sleep either.
  ( sleep 40; kill -CONT "$victim"; kill -KILL "$victim"; kill "$job" ) </dev/null >/dev/null 2>&1 &
  watchdog=$!
  wait "$job"
  rc=$?
  took=$(( $(date +%s) - start ))
  pkill -P "$watchdog" 2>/dev/null  # its sleep
  kill "$watchdog" 2>/dev/null
  kill -CONT "$victim" 2>/dev/null
  if [ "$rc" -eq 0 ] || [ "$took" -gt 30 ] || ! grep -q "$expected" "$work/$what.out"; then
    fail "$what: status $rc after $took s (want non-zero within 30 s, output with '$expected'):"; tail -20 "$work/$what.out"
  else
    echo "ok: $what: rank 1 SIG$sig -> status $rc after $took s; $(grep -m1 "$expected" "$work/$what.out")"
  fi
done

fi

if want signal; then
# --- signal: a stop asked of one rank, or of mpirun, stops the job at one step; 2 ranks resume it exactly ---
sig_args="--data=synthetic --mlp_hidden=64,32 --batch_size=32 --epochs=0 --eval_every=1000 --eval_batches=1
  --progress=none --threads=1 --precision=fp16 --optimizer=adam"
sig_total=20000  # about 5 s on 2 ranks; a SIGTERM to mpirun reaches the ranks 1 s after it is sent
started=$(date +%s)
# Each rank through a wrapper that writes its exit status to DIR/rank<R>.status (case a). The wrapper catches the
# signals mpirun sends to the rank's whole process group, so that it outlives the program to write it; the
# program starts with them at their defaults (exec resets a caught signal).
cat >"$work/rank.sh" <<'END_OF_WRAPPER'
#!/bin/sh
dir=$1
shift
trap 'echo "wrapper of rank $OMPI_COMM_WORLD_RANK: a signal" >&2' TERM INT USR1
"$@"
rc=$?
echo "$rc" >"$dir/rank$OMPI_COMM_WORLD_RANK.status"
exit "$rc"
END_OF_WRAPPER
descendants() { for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
# The pid of rank R's mantissa-train process among the job's descendants.
rank_pid() {  # rank_pid JOB R
  for p in $(descendants "$1"); do
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = mantissa-train ] &&
       tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
  done
}
sig_last_step() { tail -n 4 "$1" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p' | tail -1 | grep . || echo 0; }
sig_normalized() {
  grep -v '^{"event": "\(stopped\|resumed\)"' "$1" | sed -e 's/, "samples_per_s": [^,}]*//' -e 's/, "wall_s": [^,}]*//'
}
. "$(dirname "$0")/../support/same_state.sh"  # same_state A B OUT
d="$work/signal"
mkdir -p "$d"
# shellcheck disable=SC2086
mpi 2 "$prog" $sig_args --max_steps=$sig_total --checkpoint_dir="$d/full" --metrics="$d/full.jsonl" >"$d/full.out" 2>&1 ||
  { fail "signal: the unbroken 2-rank run failed:"; tail -5 "$d/full.out"; }
sig_normalized "$d/full.jsonl" >"$d/full.norm"
# NAME SIGNAL TARGET (rank1 | mpirun) RESUME SEED (of the step to wait for and the pause after it)
for case in "usr1-rank1 USR1 rank1 latest 3" "usr1-mpirun USR1 mpirun latest 5" "term-mpirun TERM mpirun auto 4"; do
  # shellcheck disable=SC2086
  set -- $case
  name=$1 sig=$2 target=$3 resume=$4 seed=$5
  c="$d/$name"
  mkdir -p "$c"
  at=$(awk -v s="$seed" 'BEGIN { srand(s); print 20 + int(1500 * rand()) }')
  pause=$(awk -v s="$seed" 'BEGIN { srand(s); rand(); printf "%.3f", 0.3 * rand() }')
  # mpirun itself in the background (not the mpi function: $! would be a subshell). The ranks through the
  # wrapper, except when mpirun is signalled: it SIGKILLs its children (the wrappers) in the end, which
  # would leave the programs running on.
  wrapper="sh $work/rank.sh $c"
  [ "$target" = mpirun ] && wrapper=""
  # shellcheck disable=SC2086
  "$mpirun" --allow-run-as-root --oversubscribe -np 2 $wrapper "$prog" $sig_args \
    --max_steps=$sig_total --checkpoint_dir="$c/ckpt" --metrics="$c/m.jsonl" >"$c/out" 2>&1 &
  job=$!
  i=0
  while [ "$(sig_last_step "$c/m.jsonl")" -lt "$at" ] && kill -0 "$job" 2>/dev/null && [ $i -lt 1500 ]; do
    sleep 0.02; i=$((i + 1))
  done
  sleep "$pause"
  if [ "$target" = rank1 ]; then victim=$(rank_pid "$job" 1); else victim=$job; fi
  if [ -z "$victim" ]; then fail "$name: no rank-1 process found"; kill "$job"; wait "$job"; continue; fi
  sent_at=$(sig_last_step "$c/m.jsonl")
  t0=$(date +%s.%N)
  kill -"$sig" "$victim"
  # Watchdog: a hang must not hang the test (its output goes nowhere, so that ctest does not wait for it).
  ( sleep 60; kill -KILL "$job" ) </dev/null >/dev/null 2>&1 &
  watchdog=$!
  wait "$job"
  rc=$?
  took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  pkill -P "$watchdog" 2>/dev/null
  kill "$watchdog" 2>/dev/null
  r0=$(cat "$c/rank0.status" 2>/dev/null || echo -) r1=$(cat "$c/rank1.status" 2>/dev/null || echo -)  # -: not recorded
  left=$(pgrep -f -- "--checkpoint_dir=$c/ckpt" | wc -l)
  step=$(sed -n 's/^step_\([0-9]*\)\.h5$/\1/p' "$c/ckpt/latest" 2>/dev/null)
  want="{\"event\": \"stopped\", \"step\": $step, \"signal\": \"SIG$sig\", \"checkpoint\": \"step_$step.h5\"}"
  said=$(grep -o "stopped by SIG$sig at step [0-9]*" "$c/out" | sed 's/.* //' | sort -u | tr '\n' ' ')
  files=$(cd "$c/ckpt" 2>/dev/null && echo .* * | sed 's/^\. \.\. *//')
  echo "$name: SIG$sig to $target at step $sent_at: mpirun status $rc after $took s, rank statuses $r0 $r1," \
    "latest step ${step:-none}, stop messages' steps: ${said:-none}; checkpoint folder: $files"
  if grep -q 'Process received signal\|corrupted\|double free' "$c/out"; then
    # (A signal handled inside oneDNN 2.6's JIT sgemm writes its frame into the heap: oneDNN issue 4845.)
    fail "$name: a rank crashed:"; grep -m3 -A3 'corrupted\|double free\|Process received signal' "$c/out"
    pkill -KILL -f -- "--checkpoint_dir=$c/ckpt"; continue
  elif [ "$left" -ne 0 ]; then
    fail "$name: $left rank(s) still running after mpirun returned"; pkill -KILL -f -- "--checkpoint_dir=$c/ckpt"; continue
  elif [ "$target" = rank1 ] && { [ "$r0" != 75 ] || [ "$r1" != 75 ]; }; then
    fail "$name: the ranks' exit statuses are $r0 and $r1, want 75 and 75:"; tail -20 "$c/out"; continue
  elif [ -z "$step" ] || [ "$(tail -1 "$c/m.jsonl")" != "$want" ] || [ "$said" != "$step " ]; then
    fail "$name: latest step '$step', the stop messages name steps '$said', metrics' last line:"
    tail -1 "$c/m.jsonl"; tail -20 "$c/out"; continue
  elif [ "$files" != "latest step_$step.h5" ]; then
    fail "$name: want latest and step_$step.h5 alone in the checkpoint folder: $files"; continue
  elif [ "$sig" = USR1 ] && [ "$rc" -ne 75 ]; then
    fail "$name: mpirun's status is $rc, want 75 (the ranks' status)"; tail -20 "$c/out"; continue
  elif [ "$rc" -eq 0 ]; then
    fail "$name: mpirun's status is 0"; continue
  fi
  # shellcheck disable=SC2086
  if ! mpi 2 "$prog" $sig_args --max_steps=$sig_total --checkpoint_dir="$c/ckpt" --resume="$resume" \
      --metrics="$c/m.jsonl" >"$c/resume.out" 2>&1 || ! grep -q "^resumed at step $step\$" "$c/resume.out"; then
    fail "$name: 2 ranks did not resume at step $step (--resume=$resume):"; tail -10 "$c/resume.out"; continue
  fi
  sig_normalized "$c/m.jsonl" >"$c/m.norm"
  if ! same_state "$d/full/step_$sig_total.h5" "$c/ckpt/step_$sig_total.h5" "$c/h5diff"; then
    fail "$name: the final checkpoint differs from the unbroken 2-rank run's:"; head -8 "$c/h5diff"
  elif ! cmp -s "$d/full.norm" "$c/m.norm"; then
    fail "$name: the metrics lines differ from the unbroken 2-rank run's:"; diff "$d/full.norm" "$c/m.norm" | head -6
  else
    echo "ok: $name: all stopped at step $step (rank statuses $r0 $r1, mpirun $rc, $took s); 2 ranks resumed" \
      "(--resume=$resume) to $sig_total: final $(cat "$c/h5diff")identical to the unbroken run's, metrics lines too"
  fi
done
echo "signal: wall time $(($(date +%s) - started)) s"
fi

if want ranks; then
# --- ranks: a run resumed on another number of ranks keeps its global batch and follows the unbroken run ---
# The unbroken run on FROM ranks to step TOTAL; the same run stopped at step STOP (--max_steps), resumed on TO
# ranks (--resume=latest) to TOTAL. The resumed part's losses and evaluations follow the unbroken run's
# within TOL; its step numbers, epochs, lr, loss scale and skips equal them; the metrics file holds every step
# once (appended, with its "resumed" line); the final checkpoint records the TO ranks' split of the same
# global batch (/trainer world_size, batch_size, grad_accum).
ranks_args="--data=synthetic --mlp_hidden=64,32 --eval_every=20 --eval_batches=4 --progress=none --threads=1"
# step loss epoch/lr/scale/skipped: the loss apart, for compare's tolerance; the rest must be equal.
ranks_steps() {
  grep '^{"step"' "$1" | sed 's/^{"step": \([0-9]*\), "epoch": \([0-9]*\), "loss": \([^,]*\), "lr": \([^,]*\), "scale": \([^,]*\), "skipped": \([a-z]*\),.*/\1 \3 e\2\/lr\4\/s\5\/\6/'
}
on_ranks() {  # on_ranks N ARGS...: one process without mpirun for N = 1
  n=$1
  shift
  if [ "$n" -eq 1 ]; then "$prog" "$@"; else mpi "$n" "$prog" "$@"; fi
}
trainer_attr() {  # trainer_attr FILE NAME: an attribute of /trainer
  h5dump -a "/trainer/$2" "$1" 2>/dev/null | sed -n 's/^ *(0): \([0-9]*\).*/\1/p'
}
# TAIL (optional): the step that ends epoch 0 where TO ranks pad it and FROM ranks do not: the losses follow
# within TOL up to the step before; that step's loss must differ by more than 1e-4 (the padded sample) and the
# steps after it (trained on from other weights) only share the other columns; both differences are printed.
ranks_case() {  # ranks_case NAME TOL STOP TOTAL FROM FROM-FLAGS TO TO-FLAGS WANT-SPLIT ("W B A" at TO) [TAIL]
  name=$1 tol=$2 stop=$3 total=$4 from=$5 from_flags=$6 to=$7 to_flags=$8 split=$9 tail=${10:-0}
  d="$work/ranks-$name"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  if ! on_ranks "$from" $ranks_args $from_flags --max_steps="$total" --metrics="$d/full.jsonl" >"$d/full.out" 2>&1 ||
     ! on_ranks "$from" $ranks_args $from_flags --max_steps="$stop" --checkpoint_dir="$d/ck" --metrics="$d/m.jsonl" \
       >"$d/first.out" 2>&1 ||
     ! on_ranks "$to" $ranks_args $to_flags --max_steps="$total" --checkpoint_dir="$d/ck" --resume=latest \
       --metrics="$d/m.jsonl" >"$d/resumed.out" 2>&1; then
    fail "ranks $name: a run failed"; tail -5 "$d/full.out" "$d/first.out" "$d/resumed.out" 2>/dev/null; return
  fi
  [ "$tail" -gt 0 ] || tail=$((total + 1))
  ranks_steps "$d/full.jsonl" | awk -v s="$stop" -v t="$tail" '$1 > s && $1 < t' >"$d/full.txt"
  ranks_steps "$d/m.jsonl" | awk -v s="$stop" -v t="$tail" '$1 > s && $1 < t' >"$d/resumed.txt"
  evals_of "$d/full.jsonl" | awk -v s="$stop" -v t="$tail" '$1 > s && $1 < t' >"$d/full.eval"
  evals_of "$d/m.jsonl" | awk -v s="$stop" -v t="$tail" '$1 > s && $1 < t' >"$d/resumed.eval"
  # From the tail on: the padded step alone, then the rest.
  ranks_steps "$d/full.jsonl" | awk -v t="$tail" '$1 == t' >"$d/full.tail"
  ranks_steps "$d/m.jsonl" | awk -v t="$tail" '$1 == t' >"$d/resumed.tail"
  ranks_steps "$d/full.jsonl" | awk -v t="$tail" '$1 > t' >"$d/full.after"
  ranks_steps "$d/m.jsonl" | awk -v t="$tail" '$1 > t' >"$d/resumed.after"
  tail_said=""
  if [ "$tail" -le "$total" ]; then
    padded=$(compare "$d/full.tail" "$d/resumed.tail" 1)
    if ! after=$(compare "$d/full.after" "$d/resumed.after" 1); then
      fail "ranks $name: after step $tail the steps, epochs, lr, scales or skips differ: $after"; return
    fi
    tail_said="; step $tail (the epoch's padded end): ${padded#worst relative difference }, after it: ${after#worst relative difference }"
    if ! awk -v r="${padded#worst relative difference }" 'BEGIN { exit !(r > 1e-4) }'; then
      fail "ranks $name: step $tail on $to ranks must hold the padded sample (a loss more than 1e-4 off): $padded $after"
      return
    fi
  fi
  got_split="$(trainer_attr "$d/ck/step_$total.h5" world_size) $(trainer_attr "$d/ck/step_$total.h5" batch_size)"
  got_split="$got_split $(trainer_attr "$d/ck/step_$total.h5" grad_accum)"
  steps=$(ranks_steps "$d/m.jsonl" | awk '{ print $1 }' | tr '\n' ' ')
  if ! grep -q "^resumed at step $stop\$" "$d/resumed.out"; then fail "ranks $name: not resumed at step $stop:"; cat "$d/resumed.out"
  elif [ "$steps" != "$(seq -s ' ' 1 "$total") " ] || [ "$(grep -c '"event": "resumed"' "$d/m.jsonl")" -ne 1 ]; then
    fail "ranks $name: the metrics file must hold steps 1-$total once and one resumed line: $steps"
  elif ! result=$(compare "$d/full.txt" "$d/resumed.txt" "$tol"); then fail "ranks $name losses: $result"
  elif ! eresult=$(compare "$d/full.eval" "$d/resumed.eval" "$tol"); then fail "ranks $name eval: $eresult"
  elif [ "$got_split" != "$split" ]; then
    fail "ranks $name: step_$total.h5 records world_size batch_size grad_accum '$got_split', want '$split'"
  else
    echo "ok: ranks $name: stopped at $stop on $from, resumed on $to to $total ($got_split):" \
      "$(wc -l <"$d/resumed.txt") steps follow the unbroken run, losses: $result; eval: $eresult$tail_said"
  fi
}
# Tolerances (worst relative difference over the resumed steps' losses and evaluations), measured: see below.
# 2 -> 1 with the flags unchanged (--global_batch splits itself), SGD, across the end of epoch 0 (step 86 of
# 8,192 samples in steps of 96: its last, of 32 samples; 2 divides 8,192, so no rank pads).
ranks_case 2to1 1e-5 60 100 2 "--global_batch=96 --precision=fp32 --optimizer=sgd --lr=0.01" \
  1 "--global_batch=96 --precision=fp32 --optimizer=sgd --lr=0.01" "1 96 1"
# 1 -> 2 with --batch_size halved by hand, fp16 (the loss scaler's state carries over: equal scales and skips).
ranks_case 1to2 1e-3 60 100 1 "--batch_size=96 --precision=fp16 --optimizer=adam" \
  2 "--batch_size=48 --precision=fp16 --optimizer=adam" "2 48 1"
# 2 -> 3, Adam, across the end of epoch 0: 3 ranks pad its 8,192 samples to 8,193 with the epoch's first
# sample again (DistributedSampler), so step 86 takes 32 samples on 2 ranks and 33 on 3 (measured: 2.5e-3
# off), and Adam carries that on (steps 87-100: up to 4e-4). Up to step 85 rounding alone: 7e-8.
ranks_case 2to3 1e-5 30 100 2 "--global_batch=96 --precision=fp32 --optimizer=adam" \
  3 "--global_batch=96 --precision=fp32 --optimizer=adam" "3 32 1" 86
# 2 -> 1 keeping the batch per rank with 2 micro-batches: the position is rescaled (batch 60 of 96 samples is
# batch 120 of 48), across the end of epoch 0.
ranks_case 2to1-accum 1e-5 60 100 2 "--batch_size=48 --precision=fp32 --optimizer=sgd --lr=0.01" \
  1 "--batch_size=48 --grad_accum=2 --precision=fp32 --optimizer=sgd --lr=0.01" "1 48 2"

# Refused: the 3-rank checkpoint of 2to3 (3 x 32 = 96 per step) on 5 ranks, which cannot split 96, and on 2
# ranks with its --batch_size=32 (64 per step): every rank exits 2 before it trains, rank 0 prints one line,
# and the checkpoint folder is as it was.
ck="$work/ranks-2to3/ck"
before=$(cd "$ck" && md5sum latest step_*.h5)
# ranks_refused NAME N LINE FLAGS
ranks_refused() {
  name=$1 n=$2 line=$3 flags=$4
  # shellcheck disable=SC2086
  mpi "$n" "$prog" $ranks_args --precision=fp32 --optimizer=adam $flags --max_steps=100 --checkpoint_dir="$ck" \
    --resume=latest >"$work/ranks-$name.out" 2>"$work/ranks-$name.err"
  rc=$?
  said=$(grep -c '^mantissa-train: ' "$work/ranks-$name.err")
  if [ "$rc" -ne 2 ] || [ "$said" -ne 1 ] || ! grep -qF "mantissa-train: $line" "$work/ranks-$name.err"; then
    fail "ranks $name: want exit 2 and one line 'mantissa-train: $line', got $rc:"; grep '^mantissa' "$work/ranks-$name.err"
  elif [ "$(cd "$ck" && md5sum latest step_*.h5)" != "$before" ]; then fail "ranks $name: the checkpoint folder changed"
  else echo "ok: ranks $name: exit 2, $(grep '^mantissa-train: ' "$work/ranks-$name.err")"; fi
}
ranks_refused 5-ranks 5 "checkpoint $ck/step_100.h5 was written by 3 ranks x 32 per rank = 96 per step, which 5 ranks cannot split evenly (the global batch is kept across a resume: resume on a number of ranks that divides 96)" \
  "--global_batch=96"
ranks_refused batch-size 2 "--batch_size=32: checkpoint $ck/step_100.h5 was written by 3 ranks x 32 per rank = 96 per step; 2 ranks need --batch_size=48 (the global batch is kept across a resume; --global_batch=96 splits itself over any number of ranks)" \
  "--batch_size=32"

# With ZeRO-1 (--zero=1 wherever there are several ranks): the same three changes; the checkpoints hold the
# whole optimizer state, so the runs must log exactly what the plain runs above logged.
ranks_case zero-2to1 1e-5 60 100 2 "--global_batch=96 --precision=fp32 --optimizer=sgd --lr=0.01 --zero=1" \
  1 "--global_batch=96 --precision=fp32 --optimizer=sgd --lr=0.01" "1 96 1"
ranks_case zero-1to2 1e-3 60 100 1 "--batch_size=96 --precision=fp16 --optimizer=adam" \
  2 "--batch_size=48 --precision=fp16 --optimizer=adam --zero=1" "2 48 1"
ranks_case zero-2to3 1e-5 30 100 2 "--global_batch=96 --precision=fp32 --optimizer=adam --zero=1" \
  3 "--global_batch=96 --precision=fp32 --optimizer=adam --zero=1" "3 32 1" 86
for case in 2to1 1to2 2to3; do
  ranks_steps "$work/ranks-$case/m.jsonl" >"$work/ranks-$case.all"
  ranks_steps "$work/ranks-zero-$case/m.jsonl" >"$work/ranks-zero-$case.all"
  if cmp -s "$work/ranks-$case.all" "$work/ranks-zero-$case.all" && [ -s "$work/ranks-$case.all" ]; then
    echo "ok: ranks zero-$case: every step's line equals the plain run's bit for bit"
  else fail "ranks zero-$case: the --zero=1 run's lines differ from the plain run's:"
    diff "$work/ranks-$case.all" "$work/ranks-zero-$case.all" | head -4; fi
done
fi

if want agree; then
# --- agree: ranks started differently stop before their first collective, with one line ---
a="$work/agree"
mkdir -p "$a"
# Each rank through a wrapper that writes its exit status to $a/<case>.rank<R>.
cat >"$a/rank.sh" <<'END_OF_WRAPPER'
#!/bin/sh
out=$1
shift
"$@"
rc=$?
echo "$rc" >"$out.rank$OMPI_COMM_WORLD_RANK"
exit "$rc"
END_OF_WRAPPER
small="--data=synthetic --mlp_hidden=64,32 --batch_size=32 --progress=none --threads=1"
# agree_case NAME STATUS LINE RANK0-FLAGS RANK1-FLAGS: mpirun -np 1 (rank 0) : -np 1 (rank 1); both ranks and
# mpirun must exit STATUS within 60 s; stderr must hold LINE (a fixed string) on one line beginning with
# "mantissa-train: ", no other mantissa-train line, and nothing of a crash or an abort.
agree_case() {
  name=$1 status=$2 line=$3 one=$4 two=$5
  # shellcheck disable=SC2086
  "$mpirun" --allow-run-as-root --oversubscribe -np 1 sh "$a/rank.sh" "$a/$name" "$prog" $one : \
    -np 1 sh "$a/rank.sh" "$a/$name" "$prog" $two >"$a/$name.out" 2>"$a/$name.err" &
  job=$!
  ( sleep 60; kill -KILL "$job" ) </dev/null >/dev/null 2>&1 &
  watchdog=$!
  wait "$job"
  rc=$?
  pkill -P "$watchdog" 2>/dev/null
  kill "$watchdog" 2>/dev/null
  r0=$(cat "$a/$name.rank0" 2>/dev/null || echo -) r1=$(cat "$a/$name.rank1" 2>/dev/null || echo -)
  said=$(grep -c '^mantissa-train: ' "$a/$name.err")
  if grep -q 'double free\|corrupt\|Process received signal\|MPI_ABORT\|MPI_ERR\|aborting' "$a/$name.err"; then
    fail "agree $name: a crash or an abort:"; head -20 "$a/$name.err"
  elif [ "$rc" != "$status" ] || [ "$r0" != "$status" ] || [ "$r1" != "$status" ]; then
    fail "agree $name: mpirun exited $rc, the ranks $r0 and $r1 (want $status):"; head -20 "$a/$name.err"
  elif [ "$said" -ne 1 ] || ! grep -qF "mantissa-train: $line" "$a/$name.err"; then
    fail "agree $name: want one line with 'mantissa-train: $line', got $said:"; grep '^mantissa-train' "$a/$name.err"
  else echo "ok: agree $name: every rank exited $status; $(grep '^mantissa-train: ' "$a/$name.err" | cut -c1-230)"; fi
}
agree_case lr 2 "--lr differs between the ranks: 0.001 on rank 0, 0.002 on rank 1. HINT: start every rank with the same flags" \
  "$small --lr=0.001" "$small --lr=0.002"
agree_case mlp_hidden 2 "--mlp_hidden differs between the ranks: 64,32 on rank 0, 32 on rank 1." \
  "$small" "$small --mlp_hidden=32"
agree_case precision 2 "--precision differs between the ranks: fp32 on rank 0, fp16 on rank 1." \
  "$small --precision=fp32" "$small --precision=fp16"
# The GPT on two texts of different vocabularies (9 and 11 characters): --data_path may differ, so the
# flags agree, and the embedding's shape does not.
i=0; while [ $i -lt 400 ]; do echo abcdefgh; i=$((i + 1)); done >"$a/nine.txt"
i=0; while [ $i -lt 400 ]; do echo abcdefghij; i=$((i + 1)); done >"$a/eleven.txt"
tiny_gpt="--model=gpt --data=text --n_layer=1 --n_embd=32 --block_size=16 --batch_size=4 --max_steps=2 --sample_chars=0 --progress=none --threads=1"
agree_case vocabulary 2 "the ranks' models differ: parameter 'transformer.wte.weight': [9, 32] f32 on rank 0, [11, 32] f32 on rank 1." \
  "$tiny_gpt --data_path=$a/nine.txt" "$tiny_gpt --data_path=$a/eleven.txt"
# Checkpoints: rank 0's folder holds a 2-rank run's step 6, rank 1's nothing, then step 4 of another run,
# then a `latest` naming a file that is not there, then a copy of rank 0's folder.
# shellcheck disable=SC2086
mpi 2 "$prog" $small --max_steps=6 --checkpoint_dir="$a/r0" >"$a/setup.out" 2>&1 &&
  mpi 2 "$prog" $small --max_steps=4 --checkpoint_dir="$a/r1-step4" >>"$a/setup.out" 2>&1 ||
  { fail "agree: the runs that write the checkpoints failed:"; tail -5 "$a/setup.out"; }
mkdir -p "$a/r1-empty" "$a/r1-missing"
echo step_99.h5 >"$a/r1-missing/latest"
cp -r "$a/r0" "$a/r1-copy"
auto="$small --max_steps=8 --resume=auto"
agree_case resume-one-sees 2 "the ranks would not start from the same point: rank 0 resumes at step 6 from $a/r0/step_6.h5 (--resume=auto); rank 1 starts afresh: no checkpoint in $a/r1-empty (--resume=auto). HINT: every rank must see the same checkpoints" \
  "$auto --checkpoint_dir=$a/r0" "$auto --checkpoint_dir=$a/r1-empty"
agree_case resume-other-step 2 "the ranks would not start from the same point: rank 0 resumes at step 6 from $a/r0/step_6.h5 (--resume=auto); rank 1 resumes at step 4 from $a/r1-step4/step_4.h5 (--resume=auto)." \
  "$auto --checkpoint_dir=$a/r0" "$auto --checkpoint_dir=$a/r1-step4"
agree_case resume-missing 1 "rank 1 cannot resume: $a/r1-missing/latest: names step_99.h5" \
  "$auto --checkpoint_dir=$a/r0" "$auto --checkpoint_dir=$a/r1-missing"
# --collective_check=shapes on every rank: the run trains as usual, each collective checked first.
# shellcheck disable=SC2086
if mpi 2 "$prog" $small --max_steps=5 --collective_check=shapes >"$a/checked.out" 2>&1; then
  echo "ok: agree: 2 ranks with --collective_check=shapes trained 5 steps"
else fail "agree: 2 ranks with --collective_check=shapes failed:"; tail -10 "$a/checked.out"; fi
# Each rank with its own copy: they agree, resume at step 6 and finish.
# shellcheck disable=SC2086
if "$mpirun" --allow-run-as-root --oversubscribe -np 1 "$prog" $auto --checkpoint_dir="$a/r0" : \
    -np 1 "$prog" $auto --checkpoint_dir="$a/r1-copy" >"$a/copy.out" 2>&1 && grep -q '^resumed at step 6$' "$a/copy.out"; then
  echo "ok: agree: ranks with their own copies of the checkpoint resumed at step 6 together"
else fail "agree: ranks with their own copies of the checkpoint did not resume at step 6:"; tail -10 "$a/copy.out"; fi
fi

if want zero; then
z="$work/zero"
mkdir -p "$z"
# same NAME NP FLAGS: --zero=0 and --zero=1 on NP ranks log the same lines (timing removed) and write the same
# final /model and /optimizer.
same() {
  name=$1 np=$2 flags=$3
  for zero in 0 1; do
    # shellcheck disable=SC2086
    mpi "$np" "$prog" $common $flags --zero=$zero --checkpoint_dir="$z/$name-$zero" --metrics="$z/$name-$zero.jsonl" \
      >"$z/$name-$zero.out" 2>&1 || { fail "zero $name: --zero=$zero failed:"; tail -10 "$z/$name-$zero.out"; return; }
    grep -v '"event": "summary"' "$z/$name-$zero.jsonl" | sed 's/, "samples_per_s": [^,}]*//; s/, "time_s": [^,}]*//' >"$z/$name-$zero.txt"
  done
  last=$(ls "$z/$name-0" | grep '^step_.*\.h5$' | sort -t_ -k2 -n | tail -1)
  if ! cmp -s "$z/$name-0.txt" "$z/$name-1.txt"; then
    fail "zero $name: the metrics differ:"; diff "$z/$name-0.txt" "$z/$name-1.txt" | head -6
  elif ! h5diff "$z/$name-0/$last" "$z/$name-1/$last" /model /model >/dev/null 2>&1 ||
       ! h5diff "$z/$name-0/$last" "$z/$name-1/$last" /optimizer /optimizer >/dev/null 2>&1; then
    fail "zero $name: the final checkpoints' /model or /optimizer differ"
  else echo "ok: zero $name: --zero=1 on $np ranks equals plain data parallelism bit for bit ($(grep -c '"step"' "$z/$name-0.txt") steps, $last)"; fi
}
same mlp-fp16 2 "--precision=fp16 --optimizer=adam --batch_size=32 --max_steps=30 --clip_grad_norm=0.5"
same mlp-bf16 3 "--precision=bf16 --optimizer=sgd --lr=0.05 --batch_size=16 --max_steps=30"
# The precision ladder's rungs shard too (bf16 weights; 8-bit codes and absmax, Kahan compensation in the state).
same mlp-ladder-8bit 2 "--precision=bf16 --master_weights=none --update_rounding=stochastic --optimizer_state=8bit \
--optimizer=adamw --batch_size=32 --max_steps=30 --clip_grad_norm=0.5"
same mlp-ladder-kahan 3 "--precision=bf16 --master_weights=none --update_rounding=kahan --optimizer_state=bf16 \
--optimizer=adam --batch_size=16 --max_steps=12"
gpt="--model=gpt --n_layer=2 --n_embd=64 --block_size=32 --sample_chars=0 --precision=fp32 --optimizer=adamw --batch_size=4"
same gpt-fp32 2 "$gpt --max_steps=20 --eval_every=10 --clip_grad_norm=0.3 --tensorboard=$z/tb --tensorboard_histogram_every=5"
same gpt-fp32-3 3 "$gpt --max_steps=12 --eval_every=6 --clip_grad_norm=0.3"
[ -n "$(ls "$z/tb" 2>/dev/null)" ] || fail "zero: no TensorBoard file with --zero=1"
# Across the switch: stopped at step 12 by --max_steps with one setting, resumed to 30 with the other.
for from in 0 1; do
  to=$((1 - from)) d="$z/switch-$from"
  args="$common --precision=fp16 --optimizer=adam --batch_size=32 --clip_grad_norm=0.5"
  # shellcheck disable=SC2086
  if mpi 2 "$prog" $args --max_steps=12 --zero=$from --checkpoint_dir="$d" >"$d.first.out" 2>&1 &&
     mpi 2 "$prog" $args --max_steps=30 --zero=$to --checkpoint_dir="$d" --resume=latest >"$d.resumed.out" 2>&1; then
    if h5diff "$z/mlp-fp16-0/step_30.h5" "$d/step_30.h5" /model /model >/dev/null 2>&1 &&
       h5diff "$z/mlp-fp16-0/step_30.h5" "$d/step_30.h5" /optimizer /optimizer >/dev/null 2>&1; then
      echo "ok: zero: a --zero=$from checkpoint of step 12 resumed under --zero=$to ends like the unbroken run"
    else fail "zero: --zero=$from resumed under --zero=$to: step 30's /model or /optimizer differ"; fi
  else fail "zero: --zero=$from then --zero=$to: a run failed:"; tail -10 "$d.first.out" "$d.resumed.out"; fi
done
# shellcheck disable=SC2086
mpi 2 "$prog" $common --max_steps=2 --zero=2 >"$z/bad.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q -- "--zero" "$z/bad.out"; then echo "ok: zero: --zero=2 refused (status $rc): $(grep -m1 -- '--zero' "$z/bad.out")"
else fail "zero: --zero=2: status $rc, output:"; tail -5 "$z/bad.out"; fi
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
