#!/usr/bin/env bash
# Runs a compile or link command that CMake wrote for the project's C++ compiler (g++) with clang++ and
# libFuzzer + ASan instead: "clang_launcher.sh <clang++> <g++> <args...>". The library stays g++-built
# (same libstdc++ ABI); -fopenmp is dropped so that only g++'s libgomp, which the library uses, is linked.
clang="$1"
shift 2
args=()
for a in "$@"; do
  [[ "$a" == -fopenmp ]] || args+=("$a")
done
exec "$clang" -fsanitize=fuzzer,address -g "${args[@]}"
