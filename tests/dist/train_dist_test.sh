#!/bin/sh
# mantissa-train under mpirun (issue 8), end to end.
# Usage: train_dist_test.sh MPIRUN PATH/TO/mantissa-train [follow | resume | all] (default all)
#   follow: 2 ranks with --batch_size=B log the same losses (the mean over the ranks) and evaluation losses
#           as one process with 2B, for 50 steps, SGD and Adam, fp32 and fp16 (and with accumulation, and
#           the GPT), within float32 tolerance (fp16: see below); only rank 0 prints.
#   resume: 2 ranks resume from the checkpoint rank 0 wrote and log the same losses and scales, bit for bit,
#           as the unbroken 2-rank run; their final checkpoints' /model groups are identical (h5diff).
#   stop:   one rank stopped (SIGSTOP) mid-run: the other times out (--dist_timeout=3) and the job ends with
#           a non-zero status and the message within 30 s.  kill: one rank SIGKILLed ends the job likewise.
#   (mode "resume" runs resume, stop and kill: ctest runs the two halves as two tests.)
set -u
mpirun=$1 prog=$2 mode=${3:-all}
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
# follow NAME TOL ONE-PROCESS-FLAGS TWO-RANK-FLAGS: 50 steps each (common flags, model and precision in
# both); the step-1 loss (the same weights, before any update) must agree to 1e-6 whatever the precision,
# which a wrong shard or a loss not averaged over the ranks would break.
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
  else echo "ok: $name: 2 ranks follow one process for 50 steps, losses: $result; eval: $eresult"; fi
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
# A small GPT on synthetic tokens: every parameter is reduced, the evaluation split among the ranks.
gpt="--model=gpt --n_layer=1 --n_embd=32 --block_size=16 --sample_chars=0 --precision=fp32 --optimizer=adam"
follow gpt-fp32-adam 1e-5 "$gpt --batch_size=8" "$gpt --batch_size=4"
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
  start=$(date +%s)
  kill -"$sig" "$victim"
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

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
