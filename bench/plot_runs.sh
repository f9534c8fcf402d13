#!/bin/sh
# Draws training runs side by side (bench/fp8_recipes.sh's recipes, bench/precision_ladder.sh's rungs: any
# mantissa-train --metrics files), where they differ: each run's training loss as a moving average
# over 100 steps (left) and its evaluation losses (right), zoomed to the range the runs span, one colour per run,
# named by its file (without .jsonl).
#   bench/plot_runs.sh A.jsonl B.jsonl [...] OUT.png
# (scripts/plot_metrics.sh draws the raw curves; with eight recipes that close together it shows one band.)
set -eu

if [ "$#" -lt 2 ]; then
  echo "usage: $0 METRICS.jsonl [MORE.jsonl ...] OUT.png" >&2
  exit 2
fi
runs=$(($# - 1))
eval "out=\${$#}"
work=$(mktemp -d "${TMPDIR:-/tmp}/plot_runs.XXXXXX")
trap 'rm -rf "$work"' EXIT

i=0
for metrics in "$@"; do
  [ "$i" -lt "$runs" ] || break
  i=$((i + 1))
  [ -s "$metrics" ] || { echo "plot_runs: $metrics: missing or empty" >&2; exit 1; }
  basename "$metrics" .jsonl >"$work/$i.name"
  # Training steps: the mean of the last 100 losses; evaluations: step and loss.
  awk -v smooth="$work/$i.train" -v evals="$work/$i.eval" '
    function val(key) { return match($0, "\"" key "\": [^,}]*") ? substr($0, RSTART + length(key) + 4, RLENGTH - length(key) - 4) : "" }
    /"event": "eval"/ { print val("step"), val("loss") > evals; next }
    /"event"/ { next }
    /"step"/ {
      l = val("loss"); if (l == "null") next
      n++; a[n] = l; sum += l
      if (n > 100) { sum -= a[n - 100]; delete a[n - 100] }
      if (n >= 100) print val("step"), sum / 100 > smooth
    }' "$metrics"
done

colours="1f77b4 d62728 2ca02c ff7f0e 9467bd 8c564b 17becf 7f7f7f"
train_plots="" eval_plots=""
i=0
while [ "$i" -lt "$runs" ]; do
  i=$((i + 1))
  c=$(echo "$colours" | cut -d' ' -f$(((i - 1) % 8 + 1)))
  name=$(cat "$work/$i.name")
  [ -z "$train_plots" ] || train_plots="$train_plots, "
  [ -z "$eval_plots" ] || eval_plots="$eval_plots, "
  train_plots="$train_plots'$work/$i.train' using 1:2 with lines lw 2 lc rgb '#$c' title '$name'"
  eval_plots="$eval_plots'$work/$i.eval' using 1:2 with linespoints lw 2 pt 7 ps 1 lc rgb '#$c' title '$name'"
done
gnuplot <<GNUPLOT
set terminal pngcairo size 1400,560 font ',11' noenhanced
set output '$out'
set datafile missing 'null'
set multiplot layout 1,2
set grid
set xlabel 'step'
set ylabel 'training loss, mean of the last 100 steps'
set key top right
plot $train_plots
set ylabel 'evaluation loss'
plot $eval_plots
unset multiplot
GNUPLOT
[ -s "$out" ] || { echo "plot_runs: gnuplot wrote no $out" >&2; exit 1; }
