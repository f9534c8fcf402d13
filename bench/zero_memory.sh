#!/bin/sh
# ZeRO-1 (issue 34): peak memory per rank and step time, --zero=1 against plain data parallelism.
# Usage: bench/zero_memory.sh [build dir] [rounds]   (default build, 3)
# A GPT of 6 layers x 384 (10.8M parameters; AdamW's two moments are 86 MB) in bf16 on synthetic tokens,
# batch 8 x 64 tokens per rank, 20 steps, one thread per rank. For 1, 2 and 4 ranks it prints each rank's
# peak RSS (/usr/bin/time: installed by scripts/install-deps.sh --bench) and the ZeRO-1 line naming the
# rank's shard; at 2 ranks it alternates --zero=0 and --zero=1 for `rounds` rounds and prints the median
# step time of each run (samples/s of the metrics lines after 5 warm-up steps) and the median ratio.
set -eu
build=${1:-build} rounds=${2:-3}
prog=$build/train/mantissa-train
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args="--model=gpt --data=synthetic --n_layer=6 --n_embd=384 --block_size=64 --batch_size=8 --precision=bf16
  --optimizer=adamw --max_steps=20 --eval_every=1000 --eval_batches=1 --sample_chars=0 --threads=1 --progress=none"
run() {  # run NP ZERO TAG: prints the per-rank peak RSS in MiB; leaves the metrics in $work/TAG.jsonl
  # shellcheck disable=SC2086
  mpirun --allow-run-as-root --oversubscribe -np "$1" /usr/bin/time -f "peak_rss_kib %M" "$prog" $args --zero="$2" \
    --metrics="$work/$3.jsonl" >"$work/$3.out" 2>&1 || { cat "$work/$3.out"; exit 1; }
}
median_step_ms() {  # the median step time of a metrics file, after 5 warm-up steps (global batch / samples/s)
  grep '^{"step"' "$1" | awk -v batch="$2" -F'"samples_per_s": ' 'NR > 5 { split($2, a, "[,}]"); print 1000 * batch / a[1] }' |
    sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "peak RSS per rank (MiB):"
for np in 1 2 4; do
  for zero in 0 1; do
    [ "$np" -eq 1 ] && [ "$zero" -eq 1 ] && continue
    run "$np" "$zero" "mem-$np-$zero"
    rss=$(grep peak_rss_kib "$work/mem-$np-$zero.out" | awk '{ printf "%s%.0f", sep, $2 / 1024; sep = " " }')
    shard=$(grep -m1 'ZeRO-1: rank 0' "$work/mem-$np-$zero.out" || true)
    echo "  $np rank(s), --zero=$zero: $rss   ${shard}"
  done
done
echo "step time at 2 ranks (ms, median of steps 6-20), $rounds rounds:"
ratios=""
for r in $(seq "$rounds"); do
  run 2 0 "t0-$r"
  run 2 1 "t1-$r"
  a=$(median_step_ms "$work/t0-$r.jsonl" 16) b=$(median_step_ms "$work/t1-$r.jsonl" 16)
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
  ratios="$ratios $ratio"
  echo "  round $r: --zero=0 $a, --zero=1 $b, ratio $ratio"
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n |
  awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
        printf "median ratio (zero=1 / zero=0) %.3f, range %.3f-%.3f\n", m, v[1], v[NR] }'
