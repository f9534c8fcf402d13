#!/bin/sh
# The layer rule, checked by the compiler: each layer compiles against its include view
# (build/layer_views/<layer>/, made by CMakeLists.txt), so a header of a higher layer is not found there,
# while every layer it may use is.
# Usage: layer_rule_test.sh <c++ compiler> <views dir> <layer>=<dep>,<dep>... (one argument per layer)
set -u
cxx=$1 views=$2
shift 2
header() {  # one public header per layer
  case $1 in
    framework) echo framework/tensor.h ;; ops) echo ops/elementwise/elementwise.h ;; optim) echo optim/optimizer.h ;;
    amp) echo amp/grad_scaler.h ;; data) echo data/dataset.h ;; models) echo models/mlp.h ;;
    train) echo train/trainer.h ;; *) echo "layer_rule_test: unknown layer $1" >&2; exit 2 ;;
  esac
}
all=""
for spec in "$@"; do all="$all ${spec%%=*}"; done
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
failures=0
for spec in "$@"; do
  layer=${spec%%=*}
  allowed="$layer $(echo "${spec#*=}" | tr ',' ' ')"
  # What it may include compiles...
  : > "$tmp/ok.cc"
  for m in $allowed; do echo "#include \"$(header "$m")\"" >> "$tmp/ok.cc"; done
  if ! "$cxx" -std=c++20 -fsyntax-only -I "$views/$layer" "$tmp/ok.cc" 2> "$tmp/err"; then
    echo "FAIL: $layer cannot include its own or lower layers ($allowed):"; cat "$tmp/err"; failures=$((failures + 1))
  fi
  # ...and each higher layer's header is not found.
  for m in $all; do
    case " $allowed " in *" $m "*) continue ;; esac
    echo "#include \"$(header "$m")\"" > "$tmp/up.cc"
    if "$cxx" -std=c++20 -fsyntax-only -I "$views/$layer" "$tmp/up.cc" 2> "$tmp/err"; then
      echo "FAIL: $layer includes $(header "$m") (layer $m is not below it)"; failures=$((failures + 1))
    elif ! grep -q "No such file" "$tmp/err"; then
      echo "FAIL: $layer including $(header "$m") failed for another reason:"; cat "$tmp/err"; failures=$((failures + 1))
    else
      echo "ok: $layer cannot include $(header "$m")"
    fi
  done
done
[ "$failures" -eq 0 ] && echo "layer rule holds for:$all"
exit "$failures"
