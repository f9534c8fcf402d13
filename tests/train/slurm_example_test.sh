#!/bin/bash
# The SLURM script of docs/stopping-and-resuming.md, run as SLURM would run it, minus SLURM: a stand-in
# `scontrol` records the requeue, the model is small, mpirun runs 2 ranks here. USR1 to the script (what
# `#SBATCH --signal=B:USR1@120` sends) must reach every rank through mpirun, stop the run with a checkpoint
# and status 75, and requeue the job; the requeued script must resume and finish with status 0.
#   slurm_example_test.sh MPIRUN PATH/TO/mantissa-train docs/stopping-and-resuming.md
set -u
mpirun=$1 prog=$2 page=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/slurm_example_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

# The script: the ```sh block that starts with #!/bin/bash and #SBATCH lines.
awk '/^```sh$/ { block = ""; inside = 1; next } /^```$/ { if (inside && block ~ /^#!\/bin\/bash\n#SBATCH/) printf "%s", block; inside = 0; next }
     inside { block = block $0 "\n" }' "$page" >"$work/job.sbatch"
[ -s "$work/job.sbatch" ] || { echo "FAILED: no #!/bin/bash + #SBATCH block in $page"; exit 1; }
small="-np 2 $prog --data=synthetic --mlp_hidden=64,32 --batch_size=32 --eval_every=100000 --eval_batches=1 --threads=1 --progress=none --epochs=0 --max_steps=3000 --checkpoint_every=500"
sed -e "s|^run=.*|run=$work/run|" \
    -e "s|mpirun build/train/mantissa-train --model=gpt --max_steps=100000 --checkpoint_every=500|$mpirun $small|" \
    "$work/job.sbatch" >"$work/job.sh"
if ! grep -q "^run=$work/run" "$work/job.sh" || ! grep -q -- "--data=synthetic" "$work/job.sh"; then
  echo "FAILED: the SLURM script of $page no longer has the lines this test replaces (run=..., the mpirun line):"
  cat "$work/job.sbatch"
  exit 1
fi
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "$@" >>"%s/scontrol.log"\n' "$work" >"$work/bin/scontrol"
chmod +x "$work/bin/scontrol"
export PATH="$work/bin:$PATH" SLURM_JOB_ID=4242
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# First allocation: stopped by USR1 once the run has made progress.
bash "$work/job.sh" >"$work/first.out" 2>&1 &
job=$!
i=0
steps() { n=$(grep -c '^{"step"' "$work/run/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }
while [ "$(steps)" -lt 50 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
kill -USR1 "$job"
( sleep 60; kill -KILL "$job" ) </dev/null >/dev/null 2>&1 &
watchdog=$!
wait "$job"
status=$?
pkill -P "$watchdog" 2>/dev/null
kill "$watchdog" 2>/dev/null
stopped=$(sed -n 's/^{"event": "stopped", "step": \([0-9]*\), "signal": "SIGUSR1".*/\1/p' "$work/run/metrics.jsonl")
if [ "$status" -ne 75 ]; then
  fail "first allocation: status $status, want 75"; tail -20 "$work/first.out"
elif [ -z "$stopped" ] || [ "$(cat "$work/run/latest")" != "step_$stopped.h5" ]; then
  fail "first allocation: no stopped line for SIGUSR1 or latest does not name its checkpoint"; tail -3 "$work/run/metrics.jsonl"
elif [ "$(cat "$work/scontrol.log" 2>/dev/null)" != "requeue 4242" ]; then
  fail "first allocation: scontrol was not asked to requeue the job: '$(cat "$work/scontrol.log" 2>/dev/null)'"
else
  echo "ok: USR1 to the script stopped both ranks at step $stopped, checkpoint written, status 75, job requeued"
fi

# The requeued job: the same script resumes and finishes.
rm -f "$work/scontrol.log"
bash "$work/job.sh" >"$work/second.out" 2>&1
status=$?
if [ "$status" -ne 0 ] || ! grep -q "resumed at step $stopped" "$work/second.out" || [ -e "$work/scontrol.log" ]; then
  fail "requeued job: status $status (want 0), resumed at step $stopped?, requeued again?"; tail -20 "$work/second.out"
elif ! grep -q '^{"event": "summary", "steps": 3000,' "$work/run/metrics.jsonl"; then
  fail "requeued job: no summary of 3000 steps in the metrics file"; tail -3 "$work/run/metrics.jsonl"
else
  echo "ok: the requeued job resumed at step $stopped and finished (status 0, no requeue)"
fi
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
