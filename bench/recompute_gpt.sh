#!/bin/bash
# Activation checkpointing of the GPT (--recompute=blocks) against none: the peak resident memory of the
# whole process (/usr/bin/time's max RSS) and the training throughput, the same model and steps, one row
# each and their ratios. The gradients are the same bit for bit (ctest GptModel.RecomputedBlocks...).
#   bench/recompute_gpt.sh [PATH/TO/mantissa-train] [extra flags...]
set -euo pipefail
prog=${1:-build/train/mantissa-train}
shift || true
flags=(--model=gpt --data=synthetic --n_layer=6 --n_embd=256 --n_head=8 --block_size=256 --batch_size=16
       --max_steps=20 --eval_every=100000 --eval_batches=1 --sample_chars=0 --progress=none --precision=bf16 "$@")
declare -A rss rate
for mode in none blocks; do
  out=$(/usr/bin/time -f "maxrss_kb=%M" "$prog" "${flags[@]}" --recompute=$mode 2>&1)
  rss[$mode]=$(echo "$out" | sed -n 's/^maxrss_kb=//p')
  rate[$mode]=$(echo "$out" | sed -n 's/^done: .*, \([0-9.]*\) samples\/s, .*/\1/p')
  [ -n "${rss[$mode]}" ] && [ -n "${rate[$mode]}" ] || { echo "recompute_gpt: the run failed:"; echo "$out" | tail -3; exit 1; }
done
echo "flags: ${flags[*]}"
printf '| --recompute | max RSS (MiB) | samples/s |\n|---|---:|---:|\n'
for mode in none blocks; do
  printf '| %s | %d | %s |\n' "$mode" $((rss[$mode] / 1024)) "${rate[$mode]}"
done
awk -v a="${rss[blocks]}" -v b="${rss[none]}" -v c="${rate[blocks]}" -v d="${rate[none]}" \
  'BEGIN { printf "blocks / none: memory %.2f, throughput %.2f\n", a / b, c / d }'
