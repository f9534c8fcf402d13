#!/bin/sh
# Before/after for a refactor: runs the same benchmark programs from two build trees of this repository,
# alternating (base, new, base, new, ...) so both see the same machine state, and prints one markdown row
# per benchmark: the median real time of each and new/base (below 1: the new build is faster).
# Usage: bench/compare_builds.sh <base build dir> <new build dir> [rounds] [bench name ...]
#   e.g. bench/compare_builds.sh ../base/build build 3 mlp_step elementwise
# Each run: --benchmark_min_time=0.3, its JSON in a temporary folder.
set -eu
base=$1 new=$2 rounds=${3:-3}
shift 2; [ $# -gt 0 ] && shift
benches=${*:-"mlp_step cnn_step elementwise optim softmax layer_norm"}
out=$(mktemp -d) && trap 'rm -rf "$out"' EXIT
for b in $benches; do
  for d in "$base" "$new"; do
    [ -x "$d/bench/${b}_bench" ] || { echo "compare_builds: $d/bench/${b}_bench not built" >&2; exit 2; }
  done
done
for r in $(seq "$rounds"); do
  for b in $benches; do
    for side in base new; do
      if [ "$side" = base ]; then d=$base; else d=$new; fi
      "$d/bench/${b}_bench" --benchmark_min_time=0.3 --benchmark_out="$out/$side.$b.$r.json" \
        --benchmark_out_format=json > /dev/null 2>&1
    done
  done
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
def times(which):
    t = {}
    for f in sorted(glob.glob(f"{out}/{which}.*.json")):
        for b in json.load(open(f))["benchmarks"]:
            if b.get("run_type", "iteration") != "iteration":
                continue
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            t.setdefault(b["name"], []).append(b["real_time"] * scale)
    return t
base, new = times("base"), times("new")
print("| benchmark | base ms | new ms | new / base |")
print("|---|---:|---:|---:|")
for name in base:
    if name not in new:
        continue
    mb, mn = statistics.median(base[name]), statistics.median(new[name])
    print(f"| {name} | {mb:.3f} | {mn:.3f} | {mn / mb:.3f} |")
PY
