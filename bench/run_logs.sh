# Sourced by the training sweeps (bench/fp8_recipes.sh, bench/precision_ladder.sh): what a mantissa-train log says.
#   run_result LOG   the final test accuracy (percent, without the sign) or validation loss
#   run_speed LOG    the run's samples/s
#   seeds_row LOG... "n mean lo hi speed" over the logs with a result: the results' count, mean and range, the
#                    median samples/s (nothing when no log has a result)
run_result() { sed -n 's/^test accuracy: \([0-9.]*\)%.*/\1/p; s/^validation loss: //p' "$1" | tail -1; }
run_speed() { sed -n 's/^done: .* \([0-9.]*\) samples\/s.*/\1/p' "$1" | tail -1; }
seeds_row() {
  results="" speeds=""
  for log in "$@"; do
    [ -s "$log" ] || continue
    r=$(run_result "$log")
    v=$(run_speed "$log")
    [ -n "$r" ] && results="$results $r"
    [ -n "$v" ] && speeds="$speeds $v"
  done
  [ -n "$results" ] || return 0
  speed=$(echo "$speeds" | tr ' ' '\n' | grep . | sort -g |
    awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
  echo "$results" | tr ' ' '\n' | grep . | awk -v speed="$speed" '
    {s += $1; n++; if (n == 1 || $1 < lo) lo = $1; if (n == 1 || $1 > hi) hi = $1}
    END {printf "%d %.4g %.4g %.4g %s\n", n, s / n, lo, hi, speed}'
}
