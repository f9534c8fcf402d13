#!/usr/bin/env bash
# One build against another, interleaved: OLD and NEW are two build folders' bench/ (e.g. a worktree of an
# older commit built with -DMANTISSA_BUILD_BENCH=ON), ROUNDS rounds, each
# round running every case once on each side (order alternating), the median per side and the ratio range.
# CASES=<regex> keeps the cases whose benchmark name matches (e.g. CASES=GptStep/bf16).
set -euo pipefail
old=${OLD:?OLD=build/bench of the older build} new=${NEW:-build/bench}
rounds=${ROUNDS:-5}
export OMP_NUM_THREADS=2
cases=("mlp_step_bench BM_MlpStep/f32/real_time" "mlp_step_bench BM_MlpStep/bf16_autocast/real_time"
       "mlp_step_bench BM_MlpStep/fp16_scaled/real_time"
       "gpt_step_bench BM_GptStep/f32/real_time" "gpt_step_bench BM_GptStep/bf16_autocast/real_time"
       "cnn_step_bench BM_CnnStep/f32/real_time" "cnn_step_bench BM_CnnStep/bf16_autocast/real_time"
       "optim_bench BM_AdamW_Fused/real_time" "optim_bench BM_SgdMomentum_Fused/real_time"
       "profiler_bench BM_OpChain100_off/real_time" "profiler_bench BM_MlpStep_off/real_time"
       "cnn_step_bench BM_CnnStep/fp16_scaled/real_time" "gpt_step_bench BM_GptStep/fp16_scaled/real_time")
run() { "$1/$2" --benchmark_filter="^$3\$" --benchmark_min_time=1 --benchmark_format=json 2>/dev/null |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["benchmarks"][0]; print(r["real_time"])'; }
out=${TMPDIR:-/tmp}/compare_builds.tsv; : > $out
for r in $(seq 1 $rounds); do
  for c in "${cases[@]}"; do
    set -- $c
    [[ -z ${CASES:-} || $2 =~ $CASES ]] || continue
    if (( r % 2 )); then a=$(run $old $1 $2); b=$(run $new $1 $2); else b=$(run $new $1 $2); a=$(run $old $1 $2); fi
    echo -e "$2\t$r\t$a\t$b" >> $out
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
rows=collections.defaultdict(list)
for line in open(sys.argv[1]):
    n,r,a,b=line.split('\t'); rows[n].append((float(a),float(b)))
print(f"{'case':45s} {'before ms':>10s} {'after ms':>10s} {'after/before':>12s} {'range':>15s}")
for n,v in rows.items():
    ra=[b/a for a,b in v]
    print(f"{n:45s} {statistics.median([a for a,_ in v]):10.2f} {statistics.median([b for _,b in v]):10.2f} {statistics.median(ra):12.3f} {min(ra):7.3f}-{max(ra):.3f}")
PY
