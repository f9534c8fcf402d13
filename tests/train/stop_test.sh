#!/bin/bash
# Issue 15, preemption-safe runs, end to end through mantissa-train with real signals on a real process:
#   signals:  SIGTERM, SIGINT and SIGUSR1 each stop a run at a random step: exit status 75, `latest` names
#             step_N.h5, the metrics file ends with {"event": "stopped", "step": N, "signal": ..., "checkpoint":
#             "step_N.h5"}, stderr says "mantissa-train: stopped by SIG... at step N" and the checkpoint's path;
#             then --resume (latest, or auto) runs to the end: the final checkpoint equals the unbroken run's
#             (h5diff of every group but /meta) and the metrics file, the timing fields removed and the
#             stopped/resumed events left out, is the unbroken run's, line for line (fp16 and bf16 Adam,
#             fp32 SGD); {"event": "resumed", "step": N} is followed by step N + 1.
#   nodir:    without --checkpoint_dir: status 75, stderr says nothing was saved, "checkpoint": null.
#   auto:     --resume=auto with an empty (or missing) folder starts fresh and ends like a plain run; with a
#             checkpoint it resumes; a `latest` that names a missing file is an error (status 1).
#   twice:    a second SIGINT while the stop winds down (during the stop's checkpoint write of a big model)
#             kills the process by SIGINT at once (status 130); `latest` names a whole checkpoint.
#   burst:    SIGTERM every 2 ms during the long steps of a bigger model: still status 75, and the stop's
#             checkpoint resumes.
#   stop_test.sh PATH/TO/mantissa-train      (SEED=N picks another sequence of random stop moments)
set -u
prog=$1
seed=${SEED:-15}
RANDOM=$seed
work=$(mktemp -d "${TMPDIR:-/tmp}/stop_test.XXXXXX")
started=$(date +%s.%N)
. "$(dirname "$0")/signal_run_support.sh"  # start, wait_step, finish, same_state, ... and the cleanup at exit
common=(--data=synthetic "--mlp_hidden=64,32" --batch_size=32 --epochs=0 --eval_every=1000 --eval_batches=1
        --progress=none --threads=1)
total=6000  # steps of the runs that are stopped and resumed (about 1 s unbroken)

# Checks a run stopped by SIG: status 75, its messages, `latest`; sets $stop_step. DIR is the checkpoint
# folder ("" for none).
check_stopped() {  # check_stopped NAME SIG DIR METRICS ERR
  local name=$1 sig=$2 dir=$3 metrics=$4 err=$5 line want ck
  stop_step=
  line=$(grep "^mantissa-train: stopped by SIG$sig at step " "$err" | head -1)
  stop_step=$(echo "$line" | sed -n "s/^mantissa-train: stopped by SIG$sig at step \([0-9]*\).*/\1/p")
  if [ "$rc" -ne 75 ] || [ -z "$stop_step" ]; then
    fail "$name: SIG$sig: status $rc (want 75) after $took s, stderr:"; tail -5 "$err"; return 1
  fi
  if [ -n "$dir" ]; then ck="\"step_$stop_step.h5\""; else ck=null; fi
  want="{\"event\": \"stopped\", \"step\": $stop_step, \"signal\": \"SIG$sig\", \"checkpoint\": $ck}"
  if [ "$(tail -1 "$metrics")" != "$want" ]; then
    fail "$name: the metrics file's last line is not '$want':"; tail -2 "$metrics"; return 1
  fi
  if [ "$(grep '^{"step"' "$metrics" | tail -1 | sed 's/^{"step": \([0-9]*\),.*/\1/')" != "$stop_step" ]; then
    fail "$name: the last step line is not step $stop_step:"; tail -3 "$metrics"; return 1
  fi
  if [ "$stop_step" -ge "$total" ]; then fail "$name: stopped at $stop_step, the end of the run (start later)"; return 1; fi
  if [ -n "$dir" ]; then
    if [ "$(cat "$dir/latest" 2>/dev/null)" != "step_$stop_step.h5" ] || [ ! -s "$dir/step_$stop_step.h5" ]; then
      fail "$name: latest names '$(cat "$dir/latest" 2>/dev/null)', want step_$stop_step.h5:"; ls -A "$dir"; return 1
    fi
    case $line in
      *"$dir/step_$stop_step.h5"*) ;;
      *) fail "$name: the message does not name the checkpoint $dir/step_$stop_step.h5: $line"; return 1 ;;
    esac
    if has_tmp "$dir"; then fail "$name: a temporary file is left:"; ls -A "$dir"; return 1; fi
  fi
}
# The handlers are in place once the run is under way: SigCgt (hex) has SIGINT (2), SIGUSR1 (10) and
# SIGTERM (15), bits 1, 9 and 14 of its last 4 digits.
caught() {
  local mask
  mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
  [ -n "$mask" ] || return 1
  mask=$((16#${mask: -4}))
  [ $(((mask >> 1) & 1)) -eq 1 ] && [ $(((mask >> 9) & 1)) -eq 1 ] && [ $(((mask >> 14) & 1)) -eq 1 ]
}

# --- signals: stop at a random step, resume, compare with the unbroken run ---
stop_and_resume() {  # NAME SIG RESUME FLAGS...
  local name=$1 sig=$2 resume=$3 d at after
  shift 3
  d="$work/$name"
  mkdir -p "$d"
  "$prog" "${common[@]}" "$@" --max_steps=$total --checkpoint_dir="$d/full" --metrics="$d/full.jsonl" \
    >"$d/full.out" 2>&1 || { fail "$name: the unbroken run failed:"; tail -5 "$d/full.out"; return; }
  at=$((20 + RANDOM % 1500))  # wait for this step, then 0-0.3 s more
  start "$d/stop.out" "$d/stop.err" "${common[@]}" "$@" --max_steps=$total --checkpoint_dir="$d/part" \
    --metrics="$d/part.jsonl"
  wait_step "$d/part.jsonl" "$at"
  rand_sleep 0.3
  caught || fail "$name: SIGINT, SIGUSR1 and SIGTERM are not all caught (SigCgt: $(grep SigCgt "/proc/$pid/status" 2>/dev/null))"
  kill -"$sig" "$pid"
  finish 60
  check_stopped "$name" "$sig" "$d/part" "$d/part.jsonl" "$d/stop.err" || return
  if ! grep -q "^stopped at step $stop_step: " "$d/stop.out" || grep -q '^done:' "$d/stop.out"; then
    fail "$name: stdout does not end with 'stopped at step $stop_step: ...' (and no 'done:'):"; tail -3 "$d/stop.out"; return
  fi
  "$prog" "${common[@]}" "$@" --max_steps=$total --checkpoint_dir="$d/part" --resume="$resume" --metrics="$d/part.jsonl" \
    >"$d/resume.out" 2>&1 || { fail "$name: the resumed run failed:"; tail -5 "$d/resume.out"; return; }
  grep -q "^resumed at step $stop_step\$" "$d/resume.out" ||
    { fail "$name: --resume=$resume did not say 'resumed at step $stop_step':"; head -3 "$d/resume.out"; return; }
  if ! same_state "$d/full/step_$total.h5" "$d/part/step_$total.h5" "$d/h5diff"; then
    fail "$name: the final checkpoint differs from the unbroken run's:"; head -8 "$d/h5diff"; return
  fi
  if [ "$(grep -c '^{"event": "resumed"' "$d/part.jsonl")" -ne 1 ] ||
     [ "$(grep -A1 "^{\"event\": \"resumed\", \"step\": $stop_step}\$" "$d/part.jsonl" | sed -n '2s/^{"step": \([0-9]*\),.*/\1/p')" != $((stop_step + 1)) ]; then
    fail "$name: want one line {\"event\": \"resumed\", \"step\": $stop_step} followed by step $((stop_step + 1)):"
    grep -n -A1 '"event": "resumed"' "$d/part.jsonl" | head -4; return
  fi
  normalized "$d/full.jsonl" >"$d/full.norm"
  normalized "$d/part.jsonl" >"$d/part.norm"
  if ! cmp -s "$d/full.norm" "$d/part.norm"; then
    fail "$name: the metrics lines (timing fields removed, stopped/resumed events left out) differ from the unbroken run's:"
    diff "$d/full.norm" "$d/part.norm" | head -6; return
  fi
  after=$(grep -c '^{"step"' "$d/part.jsonl")
  echo "ok: $name: SIG$sig at step $stop_step (waited for step $at): status 75 in $took s, latest = step_$stop_step.h5," \
    "stopped line and message right; --resume=$resume to $total: $(cat "$d/h5diff")identical, $after step lines" \
    "= the unbroken run's metrics"
}
stop_and_resume term-fp16-adam TERM latest --precision=fp16 --optimizer=adam
stop_and_resume int-bf16-adam INT auto --precision=bf16 --optimizer=adam
stop_and_resume usr1-fp32-sgd USR1 latest --precision=fp32 --optimizer=sgd --lr=0.01 --momentum=0.9

# --- nodir: no checkpoint folder: nothing saved, still 75 ---
d="$work/nodir"
mkdir -p "$d"
start "$d/out" "$d/err" "${common[@]}" --max_steps=100000 --metrics="$d/m.jsonl"
wait_step "$d/m.jsonl" 50
kill -TERM "$pid"
finish 60
if check_stopped nodir TERM "" "$d/m.jsonl" "$d/err"; then
  if grep "^mantissa-train: stopped by SIGTERM" "$d/err" | grep -qi 'nothing\|not saved\|no checkpoint'; then
    echo "ok: nodir: status 75, '$(grep "^mantissa-train: stopped" "$d/err")', metrics: $(tail -1 "$d/m.jsonl")"
  else
    fail "nodir: the message does not say that nothing was saved:"; cat "$d/err"
  fi
fi

# --- auto: --resume=auto with no checkpoint starts fresh, and is the plain run ---
d="$work/auto"
mkdir -p "$d/empty"
"$prog" "${common[@]}" --max_steps=300 --checkpoint_dir="$d/plain" --metrics="$d/plain.jsonl" >"$d/plain.out" 2>&1
"$prog" "${common[@]}" --max_steps=300 --checkpoint_dir="$d/empty" --resume=auto --metrics="$d/empty.jsonl" >"$d/empty.out" 2>&1
rc_empty=$?
"$prog" "${common[@]}" --max_steps=300 --checkpoint_dir="$d/missing" --resume=auto --metrics="$d/missing.jsonl" >"$d/missing.out" 2>&1
rc_missing=$?
normalized "$d/plain.jsonl" >"$d/plain.norm"
for what in empty missing; do
  label="an empty folder"
  [ "$what" = missing ] && label="a missing folder"
  if [ "$what" = empty ]; then r=$rc_empty; else r=$rc_missing; fi
  normalized "$d/$what.jsonl" >"$d/$what.norm" 2>/dev/null
  if [ "$r" -ne 0 ] || grep -q '^resumed' "$d/$what.out" || [ "$(cat "$d/$what/latest" 2>/dev/null)" != step_300.h5 ]; then
    fail "auto: --resume=auto with $label: status $r, latest '$(cat "$d/$what/latest" 2>/dev/null)':"; head -5 "$d/$what.out"
  elif ! cmp -s "$d/plain.norm" "$d/$what.norm" || ! same_state "$d/plain/step_300.h5" "$d/$what/step_300.h5" "$d/h5diff"; then
    fail "auto: --resume=auto with $label is not the plain run:"; diff "$d/plain.norm" "$d/$what.norm" | head -4; head -4 "$d/h5diff"
  else
    echo "ok: auto: --resume=auto with $label starts fresh: status 0, the plain run's metrics and checkpoint"
  fi
done
# And with a checkpoint there it resumes (the stop cases above use it too): 300 -> 400.
if "$prog" "${common[@]}" --max_steps=400 --checkpoint_dir="$d/empty" --resume=auto --metrics="$d/empty.jsonl" \
     >"$d/again.out" 2>&1 && grep -q '^resumed at step 300$' "$d/again.out" && [ "$(cat "$d/empty/latest")" = step_400.h5 ]; then
  echo "ok: auto: with step_300.h5 in the folder --resume=auto resumes at step 300"
else
  fail "auto: --resume=auto did not resume from step_300.h5:"; head -5 "$d/again.out"
fi

# A `latest` that names a missing file is an error (status 1), not a fresh start over a lost run.
mkdir -p "$d/broken"
echo step_5.h5 >"$d/broken/latest"
"$prog" "${common[@]}" --max_steps=300 --checkpoint_dir="$d/broken" --resume=auto >"$d/broken.out" 2>&1
r=$?
if [ "$r" -eq 1 ] && grep -q 'step_5.h5' "$d/broken.out" && [ ! -e "$d/broken/step_300.h5" ]; then
  echo "ok: auto: latest naming a missing step_5.h5 -> status 1: $(head -1 "$d/broken.out")"
else
  fail "auto: --resume=auto with latest naming a missing file: status $r (want 1):"; head -3 "$d/broken.out"
fi

# --- twice: a second SIGINT during the wind-down kills at once ---
# A big model (about 20 M parameters, Adam: a checkpoint of about 240 MB) so that the stop's checkpoint write
# takes a while: the second SIGINT goes in as soon as the write's temporary file appears ("during"), or
# 50 ms after the first ("soon": two signals sent back to back can merge into one pending signal). 75 means
# the stop finished before the second signal arrived: tried again (4 times at most); one 130 is needed in
# each mode, and nothing but 130 or 75 is accepted. After a kill `latest` still names a whole checkpoint.
d="$work/twice"
mkdir -p "$d"
big=(--data=synthetic "--mlp_hidden=4096,4096" --batch_size=32 --epochs=0 --eval_every=100000 --eval_batches=1
     --progress=none --threads=1 --precision=fp32 --optimizer=adam --max_steps=100000)
# The first checkpoint (step 1) exists before the trials, so that each trial resumes.
"$prog" "${big[@]}" --max_steps=1 --checkpoint_dir="$d/ckpt" >"$d/first.out" 2>&1 ||
  { fail "twice: the first run failed:"; tail -5 "$d/first.out"; }
for mode in during soon; do
  seen=""
  for _ in 1 2 3 4; do
    rm -f "$d/m.jsonl"
    before=$(cat "$d/ckpt/latest" 2>/dev/null)
    start "$d/out" "$d/err" "${big[@]}" --checkpoint_dir="$d/ckpt" --resume=latest --metrics="$d/m.jsonl"
    wait_step "$d/m.jsonl" $(("${before//[^0-9]/}" + 1))
    kill -INT "$pid"
    if [ "$mode" = during ]; then
      i=0
      while ! has_tmp "$d/ckpt" && alive && [ $i -lt 5000 ]; do sleep 0.002; i=$((i + 1)); done
    else
      sleep 0.05
    fi
    kill -INT "$pid" 2>/dev/null
    finish 120
    seen="$seen $rc"
    [ "$rc" -ne 75 ] && break
  done
  latest=$(cat "$d/ckpt/latest" 2>/dev/null)
  if [ "$rc" -ne 130 ]; then
    fail "twice ($mode): statuses$seen (want 130, or 75 then a retry):"; tail -3 "$d/err"
  elif [ ! -s "$d/ckpt/$latest" ]; then
    fail "twice ($mode): after the kill latest names '$latest', which is not there:"; ls -A "$d/ckpt"
  else
    echo "ok: twice ($mode): second SIGINT -> status 130 (statuses$seen) $took s after it was sent;" \
      "latest = $latest (was $before); in the folder: $(listing "$d/ckpt")"
  fi
done
# A dead writer's temporary file does not break the next run.
if "$prog" "${big[@]}" --max_steps=2 --checkpoint_dir="$d/ckpt" --resume=latest >"$d/after.out" 2>&1; then
  echo "ok: twice: --resume=latest after the kills loads $latest and trains on"
else
  fail "twice: --resume=latest after the kills failed:"; tail -5 "$d/after.out"
fi

# --- burst: a burst of stop signals during long steps is survived ---
# Schedulers and people may signal more than once, in the middle of whatever the process is doing, here
# mostly a large GEMM. SIGTERM every 2 ms from the second step on, until the "stopped" line appears (25 at
# most): status 75, the stop's checkpoint resumes. (oneDNN 2.6's JIT sgemm points the stack pointer into a
# heap buffer while it runs: a signal handled there writes its frame into the heap, and the process dies
# later in free(), status 134 or 139, oneDNN issue 4845. StopOnSignals blocks the signals on every thread
# but its own, which takes them with sigwait. It also lives until exit, so a SIGTERM that comes during the
# wind-down is one more request, not status 143.)
d="$work/burst"
mkdir -p "$d"
burst=(--data=synthetic "--mlp_hidden=2048,2048" --batch_size=32 --epochs=0 --eval_every=100000 --eval_batches=1
       --progress=none --threads=1 --precision=fp32 --optimizer=sgd --max_steps=100000)
for trial in 1 2 3; do
  rm -rf "$d/ckpt" "$d/m.jsonl"
  start "$d/out" "$d/err" "${burst[@]}" --checkpoint_dir="$d/ckpt" --metrics="$d/m.jsonl"
  wait_step "$d/m.jsonl" 2
  sent=0
  while [ $sent -lt 25 ] && alive && ! grep -q '^{"event": "stopped"' "$d/m.jsonl"; do
    kill -TERM "$pid" 2>/dev/null && sent=$((sent + 1))
    sleep 0.002
  done
  finish 60
  if ! check_stopped "burst $trial" TERM "$d/ckpt" "$d/m.jsonl" "$d/err"; then
    echo "(status $rc after $sent SIGTERMs 2 ms apart; stderr: $(head -c 300 "$d/err" | tr '\n' ' '))"
  elif ! "$prog" "${burst[@]}" --max_steps=$((stop_step + 1)) --checkpoint_dir="$d/ckpt" --resume=latest >"$d/resume.out" 2>&1 ||
       ! grep -q "^resumed at step $stop_step\$" "$d/resume.out"; then
    fail "burst $trial: the stop's checkpoint step_$stop_step.h5 does not resume:"; tail -3 "$d/resume.out"
  else
    echo "ok: burst $trial: $sent SIGTERMs 2 ms apart -> status 75 at step $stop_step, its checkpoint resumes"
  fi
done

echo "seed $seed; wall time $(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
