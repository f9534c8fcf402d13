#!/bin/bash
# Issue 15's soak: one run preempted CYCLES times (default 30) at random moments by a random signal among
# SIGTERM, SIGINT, SIGUSR1 and SIGKILL, each time restarted with --resume=auto (the first start too, with
# nothing to resume) and --checkpoint_every=7, then resumed to the end without a signal. Each cycle: status
# 75 (TERM, INT, USR1; the stop's step is the one in `latest`, the metrics and the message) or killed by
# signal 9 (KILL: `latest` names one of the run's earlier checkpoints); the next start says it resumed at
# `latest`'s step. At the end the final checkpoint equals the unbroken run's (h5diff of every group but
# /meta) and the metrics file, the timing fields removed and the stopped/resumed events left out, is the
# unbroken run's, line for line (so each of its lines is there exactly once: lines after the checkpoint of a
# killed run were dropped). fp16 Adam, so that the loss scaler's state goes through the checkpoints too.
#   soak_test.sh PATH/TO/mantissa-train [CYCLES]      (SEED=N: another sequence of signals and moments)
set -u
prog=$1 cycles=${2:-30}
seed=${SEED:-2026}
RANDOM=$seed
work=$(mktemp -d "${TMPDIR:-/tmp}/soak_test.XXXXXX")
started=$(date +%s.%N)
. "$(dirname "$0")/signal_run_support.sh"  # start, wait_step, finish, same_state, ... and the cleanup at exit
total=40000  # steps: about 6 s unbroken; 30 cycles take about half of them
run=(--data=synthetic "--mlp_hidden=64,32" --batch_size=32 --epochs=0 --eval_every=1000 --eval_batches=1 --progress=none
     --threads=1 --precision=fp16 --optimizer=adam --lr=0.001 "--max_steps=$total")
ck="$work/ckpt" metrics="$work/soak.jsonl"

latest_step() { sed -n 's/^step_\([0-9]*\)\.h5$/\1/p' "$ck/latest" 2>/dev/null; }

# The unbroken run.
t0=$(date +%s.%N)
"$prog" "${run[@]}" --checkpoint_dir="$work/full" --metrics="$work/full.jsonl" >"$work/full.out" 2>&1 ||
  { echo "FAILED: the unbroken run failed:"; tail -5 "$work/full.out"; exit 1; }
echo "unbroken run: $total steps in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

signals=(TERM INT USR1 KILL)
log=""
kills=0 stops=0
for cycle in $(seq 1 "$cycles"); do
  before=$(latest_step)
  start "$work/out" "$work/err" "${run[@]}" --checkpoint_dir="$ck" --checkpoint_every=7 --resume=auto --metrics="$metrics"
  # Progress first (3 steps past the checkpoint it resumed from), then 0-0.3 s more.
  wait_step "$metrics" $((${before:-0} + 3))
  rand_sleep 0.3
  sig=${signals[RANDOM % 4]}
  kill -"$sig" "$pid" 2>/dev/null
  finish 60
  # The run resumed at `latest` (its last "resumed" event; stdout is lost to a SIGKILL, a file's buffer).
  resumed=$(grep '^{"event": "resumed"' "$metrics" | tail -1)
  if [ -n "$before" ] && [ "$resumed" != "{\"event\": \"resumed\", \"step\": $before}" ]; then
    fail "cycle $cycle: --resume=auto: the last resumed event is '$resumed', want step $before:"; head -3 "$work/err"
  elif [ -n "$before" ] && [ "$sig" != KILL ] && ! grep -q "^resumed at step $before\$" "$work/out"; then
    fail "cycle $cycle: --resume=auto did not say 'resumed at step $before':"; head -3 "$work/out" "$work/err"
  elif [ -z "$before" ] && { [ -n "$resumed" ] || grep -q '^resumed' "$work/out"; }; then
    fail "cycle $cycle: --resume=auto with no checkpoint resumed:"; head -3 "$work/out"
  fi
  now=$(latest_step)
  if [ "$sig" = KILL ]; then
    kills=$((kills + 1))
    if [ "$rc" -ne 137 ]; then fail "cycle $cycle: SIGKILL: status $rc, want 137:"; tail -3 "$work/err"; break; fi
    # The last checkpoint written: a multiple of 7 after the one it resumed from, or that one.
    if [ -z "$before" ] && [ -z "$now" ]; then
      :  # killed before the first checkpoint: nothing to resume, the next start is fresh
    elif [ -z "$now" ] || [ ! -s "$ck/step_$now.h5" ] || [ "$now" -lt "${before:-0}" ] ||
       { [ "$now" != "${before:-}" ] && [ $((now % 7)) -ne 0 ]; } || [ "$now" -gt "$(last_step "$metrics")" ]; then
      fail "cycle $cycle: after SIGKILL latest names '$(cat "$ck/latest" 2>/dev/null)' (was step $before, metrics at $(last_step "$metrics"))"
      break
    fi
    log="$log $sig@$(last_step "$metrics")->$now"
  else
    stops=$((stops + 1))
    said=$(sed -n "s/^mantissa-train: stopped by SIG$sig at step \([0-9]*\).*/\1/p" "$work/err" | head -1)
    stopped="{\"event\": \"stopped\", \"step\": $now, \"signal\": \"SIG$sig\", \"checkpoint\": \"step_$now.h5\"}"
    if [ "$rc" -ne 75 ] || [ -z "$now" ] || [ "$said" != "$now" ] || [ "$(tail -1 "$metrics")" != "$stopped" ] ||
       [ ! -s "$ck/step_$now.h5" ]; then
      fail "cycle $cycle: SIG$sig: status $rc (want 75), latest step '$now', message step '$said', metrics' last line:"
      tail -1 "$metrics"; tail -3 "$work/err"; break
    fi
    log="$log $sig@$now"
  fi
  if [ "${now:-0}" -ge "$total" ]; then fail "cycle $cycle: the run reached its end ($now): raise total"; break; fi
done
echo "seed $seed, $cycles cycles ($stops stops, $kills kills), signal@step(->latest for KILL):$log"

# To the end without a signal.
before=$(latest_step)
if "$prog" "${run[@]}" --checkpoint_dir="$ck" --checkpoint_every=7 --resume=auto --metrics="$metrics" >"$work/last.out" 2>&1 &&
   grep -q "^resumed at step $before\$" "$work/last.out"; then
  if ! same_state "$work/full/step_$total.h5" "$ck/step_$total.h5" "$work/h5diff"; then
    fail "the final checkpoint differs from the unbroken run's:"; head -8 "$work/h5diff"
  else
    echo "ok: resumed at step $before to $total; final checkpoint identical to the unbroken run's: $(cat "$work/h5diff")"
  fi
  normalized "$work/full.jsonl" >"$work/full.norm"
  normalized "$metrics" >"$work/soak.norm"
  # Each unbroken line exactly once (the files are the same, line for line, when this holds and no extra line is there).
  twice=$(sort "$work/soak.norm" | uniq -d | wc -l)
  missing=$(sort "$work/full.norm" | comm -23 - <(sort -u "$work/soak.norm") | wc -l)
  extra=$(sort "$work/soak.norm" | comm -13 <(sort -u "$work/full.norm") - | wc -l)
  if [ "$twice" -ne 0 ] || [ "$missing" -ne 0 ] || [ "$extra" -ne 0 ] || ! cmp -s "$work/full.norm" "$work/soak.norm"; then
    fail "metrics: $missing of the unbroken run's lines missing, $twice repeated, $extra extra:"
    diff "$work/full.norm" "$work/soak.norm" | head -8
  else
    echo "ok: the metrics file has each of the unbroken run's $(wc -l <"$work/full.norm") lines once, in order" \
      "($(grep -c '^{"event": "resumed"' "$metrics") resumed and $(grep -c '^{"event": "stopped"' "$metrics") stopped events kept)"
  fi
else
  fail "the last resume failed (latest step $before):"; tail -5 "$work/last.out"
fi

echo "wall time $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
