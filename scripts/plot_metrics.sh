#!/bin/sh
# Renders mantissa-train metrics files (--metrics, JSON lines) to a PNG chart with gnuplot.
#   scripts/plot_metrics.sh METRICS.jsonl OUT.png
#     one run: loss against step (left axis), the loss scale (right axis, log 2), skipped steps as red
#     marks on the scale line and evaluation losses as points.
#   scripts/plot_metrics.sh A.jsonl B.jsonl [...] OUT.png
#     runs side by side (bf16 against fp8, say): each run's training loss as a faint line and its
#     evaluation losses as points joined by a line, one colour per run, named by its file.
# Our lines have a fixed shape ({"key": value, ...}, no nesting), so awk reads them; no jq or python needed.
set -eu

if [ "$#" -lt 2 ]; then
  echo "usage: $0 METRICS.jsonl [MORE.jsonl ...] OUT.png" >&2
  exit 2
fi
runs=$(($# - 1))
eval "out=\${$#}"

fail() {
  echo "plot_metrics: $*" >&2
  exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/plot_metrics.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Run i's steps.dat: step loss scale skipped(0|1); eval.dat: step loss. Non-finite numbers are null in the
# file and stay "null" here, which gnuplot is told to treat as missing.
i=0
for metrics in "$@"; do
  [ "$i" -lt "$runs" ] || break
  i=$((i + 1))
  [ -e "$metrics" ] || fail "$metrics: no such file"
  [ -r "$metrics" ] || fail "$metrics: cannot read it"
  [ -s "$metrics" ] || fail "$metrics: empty file (no metrics were written)"
  mkdir "$work/$i"
  : >"$work/$i/eval.dat"
  awk -v steps="$work/$i/steps.dat" -v evals="$work/$i/eval.dat" '
    function val(key,   s) {
      if (!match($0, "\"" key "\": [^,}]*")) return "null"
      s = substr($0, RSTART, RLENGTH)
      sub(/^"[^"]*": /, "", s)
      return s
    }
    /"event": "eval"/ { print val("step"), val("loss") > evals; next }
    /"event":/ { next }
    /^\{"step": / { print val("step"), val("loss"), val("scale"), (val("skipped") == "true" ? 1 : 0) > steps }
  ' "$metrics"
  [ -s "$work/$i/steps.dat" ] || fail "$metrics: no step records (is it a mantissa-train --metrics file?)"
  basename "$metrics" .jsonl >"$work/$i/name"
done
(: >"$out") 2>/dev/null || fail "$out: cannot create it (does its folder exist?)"
command -v gnuplot >/dev/null 2>&1 || fail "gnuplot not found. HINT: sudo apt-get install gnuplot-nox"

if gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo; then
  terminal="pngcairo size 1000,600 noenhanced"
else
  terminal="png size 1000,600 noenhanced"
fi

if [ "$runs" -eq 1 ]; then
  # A constant scale (fp32, bf16: 1) would give gnuplot an empty log range: widen it to a factor 2 each way.
  y2range=$(awk '$3 != "null" { if (n++ == 0 || $3 < lo) lo = $3; if ($3 > hi) hi = $3 }
                 END { if (n > 0 && lo == hi) printf "set y2range [%.17g:%.17g]", lo / 2, hi * 2 }' "$work/1/steps.dat")

  skipped_plot=""
  if awk '$4 == 1 { found = 1 } END { exit !found }' "$work/1/steps.dat"; then
    skipped_plot=", '' using 1:(\$4 == 1 ? \$3 : 1/0) axes x1y2 with points pt 2 ps 1.5 lc rgb '#d62728' title 'skipped step'"
  fi
  eval_plot=""
  if [ -s "$work/1/eval.dat" ]; then
    eval_plot=", '$work/1/eval.dat' using 1:2 axes x1y1 with linespoints pt 7 ps 1.2 lc rgb '#2ca02c' title 'eval loss'"
  fi

  gnuplot <<GNUPLOT >/dev/null || fail "gnuplot could not render $out"
set terminal $terminal
set output '$out'
set datafile missing 'null'
set title '$(basename "$1")'
set xlabel 'step'
set ylabel 'loss'
set y2label 'loss scale'
set ytics nomirror
set y2tics
set logscale y2 2
$y2range
set format y2 '%.10g'
set grid xtics ytics
set key top right
plot '$work/1/steps.dat' using 1:2 axes x1y1 with lines lw 1 lc rgb '#1f77b4' title 'loss', \
     '' using 1:3 axes x1y2 with steps lw 2 lc rgb '#ff7f0e' title 'loss scale'$skipped_plot$eval_plot
GNUPLOT

else
  # Runs side by side: faint training losses, eval losses as joined points, one colour per run.
  colours="1f77b4 d62728 2ca02c ff7f0e 9467bd 8c564b 17becf 7f7f7f"
  plots=""
  i=0
  while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    c=$(echo "$colours" | cut -d' ' -f$(((i - 1) % 8 + 1)))
    name=$(cat "$work/$i/name")
    [ -z "$plots" ] || plots="$plots, "
    plots="$plots'$work/$i/steps.dat' using 1:2 with lines lw 1 lc rgb '#b0$c' title '$name: training loss'"
    if [ -s "$work/$i/eval.dat" ]; then
      plots="$plots, '$work/$i/eval.dat' using 1:2 with linespoints lw 2 pt 7 ps 1.2 lc rgb '#$c' title '$name: eval loss'"
    fi
  done
  gnuplot <<GNUPLOT >/dev/null || fail "gnuplot could not render $out"
set terminal $terminal
set output '$out'
set datafile missing 'null'
set xlabel 'step'
set ylabel 'loss'
set grid xtics ytics
set key top right
plot $plots
GNUPLOT
fi

[ -s "$out" ] || fail "gnuplot wrote no $out"
