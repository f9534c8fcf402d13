#!/usr/bin/env bash
# shellcheck disable=SC2317,SC2012  # parts are called as "part_$name"; the ls calls list fixed folders
# The first lent GPU's checklist in one script (issue 19). On the GPU machine, from the repository root with
# build-device/ carried (scripts/device_bundle.sh packs it; the `run` tool's carry=["build-device"]), it
# unpacks the bundle and runs, in this order, each part under its own time limit and carrying on after a
# failure:
#   unit       the CUDA unit tests (mantissa_tests, the CUDA/GPU filter below)
#   memcheck   the same under compute-sanitizer's memcheck
#   racecheck  racecheck on the tests of mantissa's own kernels (no cuBLAS/cuDNN: KERNEL_FILTER)
#   synccheck  synccheck on the same
#   curves     the MLP and GPT loss curves on the GPU against the CPU (GpuTraining)
#   nccl       the NCCL world-of-one tests
#   step       bench/gpu_step_bench beside bench/pytorch/gpu_step.py (eager; compiled if time is left)
#   gemm       bench/cuda_gemm_bench beside cuBLAS through PyTorch (bench/pytorch/gpu_gemm.py)
#   fp8acc     the FP8 tensor core's own sums (bench/gpu/fp8_accum_probe.py) against the CPU's model of them
#              (bench/gpu/fp8_accum_fit.py, ops/fp8/accumulator.h): every output bit for bit
# and writes one markdown report, $OUT/device_check.md (date, GPU, driver and library versions, every gtest
# summary line, the sanitizers' verdicts, the benchmark tables with their ratios), and the raw logs,
# $OUT/device_check_logs.tar.gz. Where there is no GPU (a rehearsal), the GPU parts say that they skipped
# and why, and the script still exits 0. Exit status: 1 when a part failed, 2 on a usage or bundle error.
#
#   scripts/device_check.sh [--budget=SECONDS] [--also="PROGRAM ARGS"]... [PART|GROUP]...
#       PARTs as above (default: all); GROUPs name the three calls that fit the run tool's 10-minute limit:
#       tests = unit memcheck, checks = racecheck synccheck curves nccl, bench = step gemm fp8acc. --budget (default
#       1500) caps the whole call: a part gets its own limit or what is left, whichever is less, and is not
#       started with under 30 s left. --also runs a program of the bundle's bin/ after the parts (the old
#       scripts/device_run.sh's benchmarks), e.g. --also="cuda_kernels_bench --benchmark_min_time=0.2".
#   scripts/device_check.sh --combine REPORT.md... > bench/gpu/<date>/device_check.md
#       here, after several calls: one report of theirs (machine of the first, every summary row, every part).
# On the device (three calls of the run tool, each under 10 minutes, carrying build-device):
#   OUT=$OUT scripts/device_check.sh --budget=540 tests      (then checks, then bench)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

all_parts=(unit memcheck racecheck synccheck curves nccl step gemm fp8acc)
# Seconds each part may take at most (the --budget caps it further).
declare -A limit=([unit]=300 [memcheck]=480 [racecheck]=300 [synccheck]=240 [curves]=300 [nccl]=120 [step]=540
                  [gemm]=300 [fp8acc]=180)
declare -A title=([unit]="CUDA unit tests" [memcheck]="compute-sanitizer memcheck, CUDA unit tests"
                  [racecheck]="compute-sanitizer racecheck, kernel tests"
                  [synccheck]="compute-sanitizer synccheck, kernel tests" [curves]="MLP and GPT loss curves on the GPU"
                  [nccl]="NCCL world-of-one tests" [step]="training step: gpu_step_bench beside PyTorch"
                  [gemm]="GEMM: cuda_gemm_bench beside cuBLAS"
                  [fp8acc]="FP8 tensor-core sums against the CPU's accumulator model")
# Test filters. The GPU tests are the suites named Cuda*/*Cuda*/*Gpu*/Nccl* (tests/cuda) and the pinned
# DataLoader test; the curves and NCCL have parts of their own. The kernel tests leave out the suites whose
# work is cuBLAS and cuDNN (GEMM, matmul, convolution, the composed attention, the CNN) and the host-only plan
# tests; the fused attention's own kernels (CudaAttention.FusedMatchesCpu) stay in.
UNIT_FILTER='Cuda*:*Cuda*:*Gpu*:DataLoaderPinMemory.*:-*GpuTraining*:Nccl*:DeviceDispatchGroup.*'
CURVES_FILTER='*GpuTraining*'
NCCL_FILTER='Nccl*:DeviceDispatchGroup.*'
KERNEL_FILTER='Cuda*:*Cuda*:-*Gemm*:*Matmul*:*Conv*:CudaAttention.ComposedPathMatchesCpu:CudaFusedEpilogue.*:CudaCnn.*:*Plan*:*GpuTraining*'

# --combine: one report of several calls' reports.
if [[ ${1:-} == --combine ]]; then
  shift
  [[ $# -gt 0 ]] || { echo "device_check.sh --combine: name the reports to combine" >&2; exit 2; }
  awk -v n=$# '
    FNR == 1 { file++ ; section = "" }
    /^## / { section = $0 }
    /^- call: / { calls = calls "- call " file ": " substr($0, 9) "\n" }
    section == "## Machine" && file == 1 { machine = machine $0 "\n" }
    section == "## Summary" && /^\| [a-z]/ && !/^\| part / { sub(/^\| [^ |]+/, "& (call " file ")"); rows = rows $0 "\n" }
    section != "" && section != "## Machine" && section != "## Summary" {
      if ($0 == section) $0 = $0 " (call " file ")"
      body = body $0 "\n"
    }
    END {
      printf "# mantissa device check (%d calls combined)\n\n", n
      printf "%s", calls
      printf "\n%s", machine
      printf "## Summary\n\n| part | verdict | seconds | detail |\n|---|---|---:|---|\n%s\n", rows
      printf "%s", body
    }' "$@"
  exit 0
fi

budget=1500
also=()
parts=()
for arg in "$@"; do
  case $arg in
    --budget=*) budget=${arg#--budget=} ;;
    --also=*) also+=("${arg#--also=}") ;;
    tests) parts+=(unit memcheck) ;;
    checks) parts+=(racecheck synccheck curves nccl) ;;
    bench) parts+=(step gemm fp8acc) ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *)
      if [[ -n ${limit[$arg]:-} ]]; then
        parts+=("$arg")
      else
        echo "device_check.sh: unknown part or option '$arg' (parts: ${all_parts[*]}; groups: tests checks bench)" >&2
        exit 2
      fi
      ;;
  esac
done
[[ ${#parts[@]} -gt 0 ]] || parts=("${all_parts[@]}")

out=${OUT:-$root/build-device/out}
mkdir -p "$out"
logs=$(mktemp -d)/device_check_logs
mkdir -p "$logs"
report=$out/device_check.md
started=$SECONDS
note() { echo "device_check: $*" >&2; }
elapsed() { echo $((SECONDS - started)); }

# --- the bundle, the libraries, the GPU ---------------------------------------------------------------------
bundle=$root/build-device/bundle.tar.xz
if [[ ! -f $bundle ]]; then
  echo "device_check.sh: no $bundle: run scripts/device_bundle.sh <CUDA build dir> here and carry build-device" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work" "${logs%/*}"' EXIT
tar -C "$work" -xJf "$bundle" || { echo "device_check.sh: cannot unpack $bundle" >&2; exit 2; }
bin=$work/bundle/bin
# The bundle's programs see its libraries first, then the machine's CUDA libraries: /usr/local/cuda, and
# PyTorch's pip wheels (cuDNN, NCCL, cuBLAS) where the toolkit lacks them; the driver's libcuda from wherever
# the loader already finds it. Only they: the bundle's libstdc++, libgomp, OpenBLAS, ... are Debian 12's and
# would shadow the newer ones that PyTorch was built against, so Python runs in the machine's own environment.
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | paste -sd:)
pip_libs=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | paste -sd:)
benv=(env "LD_LIBRARY_PATH=$work/bundle/lib${cuda_libs:+:$cuda_libs}${pip_libs:+:$pip_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "MANTISSA_GOLDEN_DIR=$root/tests/golden" OMP_WAIT_POLICY=passive NCCL_DEBUG=WARN)
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1

python=${PYTHON:-}
if [[ -z $python ]]; then
  for p in /opt/torch/.venv/bin/python3 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then python=$p; break; fi
  done
  [[ -n $python ]] || python=$(command -v python3 || echo python3)
fi

gpu=0
if ! command -v nvidia-smi >/dev/null; then
  gpu_list="(nvidia-smi not found)"
  no_gpu_reason="no GPU here: nvidia-smi not found"
elif ! gpu_list=$(nvidia-smi -L 2>&1) || [[ $gpu_list != *GPU* ]]; then
  no_gpu_reason="no GPU here: nvidia-smi -L says $(echo "$gpu_list" | head -1 | cut -c1-120)"
else
  gpu=1
  no_gpu_reason=""
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)

# Library versions, asked of the exact files the test binary loads.
lib_of() { "${benv[@]}" ldd "$bin/mantissa_tests" 2>/dev/null | awk -v n="$1" 'index($1, n) == 1 { print ($3 == "not" ? "not found" : $3); exit }'; }
lib_version() {  # name, path: the version the library reports, through ctypes (no GPU needed)
  "${benv[@]}" "$python" - "$1" "$2" 2>/dev/null <<'EOF'
import ctypes, sys
name, path = sys.argv[1], sys.argv[2]
lib = ctypes.CDLL(path)
v = ctypes.c_int(0)
if name == "cudart":
    lib.cudaRuntimeGetVersion(ctypes.byref(v)); print(f"{v.value // 1000}.{v.value % 1000 // 10}")
elif name == "cublas":
    parts = []
    for prop in range(3):
        lib.cublasGetProperty(prop, ctypes.byref(v)); parts.append(str(v.value))
    print(".".join(parts))
elif name == "cudnn":
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    n = lib.cudnnGetVersion(); print(f"{n // 10000}.{n % 10000 // 100}.{n % 100}")
elif name == "nccl":
    lib.ncclGetVersion(ctypes.byref(v)); n = v.value; print(f"{n // 10000}.{n % 10000 // 100}.{n % 100}")
elif name == "cuda":
    lib.cuDriverGetVersion(ctypes.byref(v)); print(f"{v.value // 1000}.{v.value % 1000 // 10} (driver API)")
EOF
}

# --- the report ----------------------------------------------------------------------------------------------
declare -A verdict seconds detail
body=$(mktemp)
section() { printf '\n## %s: %s\n\n' "$1" "${title[$1]}" >>"$body"; }
say() { printf '%s\n' "$*" >>"$body"; }
fence() { { echo '```'; cat; echo '```'; } >>"$body"; }

# gtest's closing summary (from "[==========] N tests ... ran." on), and a verdict for the part. On a GPU
# machine, a test skipped with "no CUDA device" means the binary did not see the GPU: a failure.
gtest_verdict() {  # part, log, exit status
  local part=$1 log=$2 rc=$3 ran passed failed skipped reasons why
  ran=$(grep -E '^\[==========\] [0-9]+ tests? from .* ran\.' "$log" | tail -1)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$log" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$log" | tail -1)
  # Skip reasons, counted; the "no CUDA device: <why>" ones as one, with the first <why>.
  reasons=$(grep -A1 -E ': Skipped$' "$log" | grep -v -E ': Skipped$|^--$' | sed 's/^no CUDA device.*/no CUDA device/' |
    sort | uniq -c | sort -rn | head -5 | sed 's/^ *\([0-9]*\) /\1 x /' | paste -sd';' | sed 's/;/; /g')
  why=$(grep -m1 '^no CUDA device: ' "$log" | sed 's/^no CUDA device: //')
  if [[ -n $ran ]]; then
    say "gtest summary:"
    # The closing summary; a long list of skipped or failed tests is cut after 40 names (the log has all).
    awk '/^\[==========\] [0-9]+ tests? from .* ran\./ { on = 1 } on && ++n <= 44 { print }
         on && n == 45 { print "... (the rest of the list is in the log)" }' "$log" | fence
  fi
  detail[$part]="${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped${reasons:+ ($reasons${why:+: $why})}"
  if grep -q '^\[  FAILED  \] .* ([0-9]* ms)$' "$log"; then
    # Each failed test's output, from its [ RUN ] line to its [ FAILED ] line (80 lines at most in all).
    say "failures:"
    awk '/^\[ RUN      \]/ { buf = $0; next } { buf = buf "\n" $0 }
         /^\[  FAILED  \] .* \([0-9]+ ms\)$/ { print buf; buf = "" }' "$log" | head -80 | fence
  fi
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    verdict[$part]="FAIL (time limit)"
    say "stopped at the time limit; the log ends:"
    tail -15 "$log" | fence
  elif [[ -z $ran ]]; then
    verdict[$part]="FAIL (exit $rc, no gtest summary)"
    say "no gtest summary; the log ends:"
    tail -25 "$log" | fence
  elif [[ ${failed:-0} -gt 0 || $rc -ne 0 ]]; then
    verdict[$part]="FAIL (exit $rc)"
  elif [[ $gpu -eq 1 ]] && grep -q '^no CUDA device' "$log"; then
    verdict[$part]="FAIL (GPU tests skipped on a GPU machine)"
    say "The tests did not see the GPU: $(grep -m1 '^no CUDA device' "$log")"
  elif [[ $gpu -eq 0 ]]; then
    verdict[$part]="SKIPPED (no GPU; the CPU-side tests ran)"
  else
    verdict[$part]=PASS
  fi
}

# Seconds a part may run: its own limit or what is left of the budget, whichever is less (0: not enough).
allowed() {
  local left=$((budget - $(elapsed) - 10))
  local t=${limit[$1]}
  ((left < t)) && t=$left
  ((t < 30)) && t=0
  echo "$t"
}

run_tests() {  # part, filter, [sanitizer tool]
  local part=$1 filter=$2 tool=${3:-} t log rc cmd
  t=$(allowed "$part")
  log=$logs/$part.log
  if [[ -n $tool ]]; then
    cmd=("$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 100 "$bin/mantissa_tests" "--gtest_filter=$filter")
  else
    cmd=("$bin/mantissa_tests" "--gtest_filter=$filter")
  fi
  say "command (limit ${t} s): \`${cmd[*]/#$bin\//}\`"
  say ""
  timeout --kill-after=15 "$t" "${benv[@]}" "${cmd[@]}" >"$log" 2>&1
  rc=$?
  gtest_verdict "$part" "$log" "$rc"
  if [[ -n $tool ]]; then
    # compute-sanitizer's own verdict: "ERROR SUMMARY: N errors" (memcheck, synccheck) or "RACECHECK SUMMARY".
    local summary
    summary=$(grep -E '^========= (ERROR|RACECHECK) SUMMARY' "$log" | tail -1 | sed 's/^========= //')
    say "sanitizer: ${summary:-no summary line (see the log)}"
    grep -m 20 -E '^========= (Invalid|Program hit|Race|Barrier|Error|Uninitialized|Leaked)' "$log" | fence
    detail[$part]="${summary:-no sanitizer summary}; ${detail[$part]}"
    if [[ $rc -eq 86 ]] || [[ -n $summary && ! $summary =~ ^(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards) ]]; then
      verdict[$part]="FAIL (sanitizer errors)"
    fi
  fi
}

part_unit() { run_tests unit "$UNIT_FILTER"; }
part_curves() { run_tests curves "$CURVES_FILTER"; }
part_nccl() { run_tests nccl "$NCCL_FILTER"; }
sanitizer_part() {  # part, tool, filter
  if [[ $gpu -eq 0 ]]; then
    verdict[$1]="SKIPPED (no GPU)"
    detail[$1]=$no_gpu_reason
    say "skipped: $no_gpu_reason; compute-sanitizer: ${sanitizer:-not found}."
  elif [[ -z $sanitizer ]]; then
    verdict[$1]="FAIL (no compute-sanitizer)"
    say "compute-sanitizer is not on the PATH nor in /usr/local/cuda/compute-sanitizer."
  else
    run_tests "$1" "$3" "$2"
  fi
}
part_memcheck() { sanitizer_part memcheck memcheck "$UNIT_FILTER"; }
part_racecheck() { sanitizer_part racecheck racecheck "$KERNEL_FILTER"; }
part_synccheck() { sanitizer_part synccheck synccheck "$KERNEL_FILTER"; }

# A bench program or script under a time limit; its output is in $logs/<name>.log. Returns its status. The
# bundle's programs run with its libraries, Python in the machine's environment.
run_bench() {  # name, limit, command...
  local name=$1 t=$2 rc prefix=()
  shift 2
  [[ $1 == "$bin"/* ]] && prefix=("${benv[@]}")
  local shown=("${@/#$bin\//}")
  say "command (limit ${t} s): \`${shown[*]//$logs\//}\`"
  timeout --kill-after=15 "$t" "${prefix[@]}" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  [[ $rc -eq 124 || $rc -eq 137 ]] && echo "(stopped at the time limit, ${t} s)" >>"$logs/$name.log"
  return $rc
}
skip_line() { grep -m1 -E 'skipped' "$1" 2>/dev/null; }

part_step() {
  local t rc_m rc_p rc_c=0 steps=20 left
  t=$(allowed step)
  # mantissa first, then PyTorch eager: each at most 40% of the part; the compiled rows take what is left
  # (torch.compile of GPT-2 small takes a minute or two), and only the GPT in bf16.
  run_bench gpu_step_bench $((t * 2 / 5)) "$bin/gpu_step_bench" --steps="$steps"
  rc_m=$?
  run_bench gpu_step_py $((t * 2 / 5)) "$python" "$root/bench/pytorch/gpu_step.py" --steps "$steps" --mode eager
  rc_p=$?
  left=$((t - $(elapsed) + ${part_start:-0}))
  if [[ $gpu -eq 1 && $left -ge 120 ]]; then
    run_bench gpu_step_compile "$left" "$python" "$root/bench/pytorch/gpu_step.py" --steps "$steps" --mode compile \
      --models gpt --precisions bf16
    rc_c=$?
  else
    say "torch.compile rows: not run ($([[ $gpu -eq 0 ]] && echo "no GPU" || echo "${left} s left, 120 needed"))."
    : >"$logs/gpu_step_compile.log"
  fi
  say ""
  say "outputs:"
  cat "$logs/gpu_step_bench.log" "$logs/gpu_step_py.log" "$logs/gpu_step_compile.log" | fence
  if [[ $gpu -eq 0 ]]; then
    verdict[step]="SKIPPED (no GPU)"
    detail[step]="$(skip_line "$logs/gpu_step_bench.log" || echo "gpu_step_bench: exit $rc_m"); $(skip_line "$logs/gpu_step_py.log" || echo "gpu_step.py: exit $rc_p")"
    return
  fi
  say ""
  bash "$root/bench/compare_gpu.sh" --join "$logs/gpu_step_bench.log" "$logs/gpu_step_py.log" "$logs/gpu_step_compile.log" \
    >"$logs/step_table.md" 2>&1
  cat "$logs/step_table.md" >>"$body"
  local rows
  rows=$(grep -c '^mantissa [a-z]* [a-z0-9]* ms=' "$logs/gpu_step_bench.log")
  detail[step]="$rows mantissa rows; ratio = PyTorch ms / mantissa ms"
  if [[ $rc_m -ne 0 || $rows -eq 0 ]]; then
    verdict[step]="FAIL (gpu_step_bench exit $rc_m, $rows rows)"
  elif [[ $rc_p -ne 0 || $rc_c -ne 0 ]] || grep -q -E 'skipped|failed' "$logs/gpu_step_py.log" "$logs/gpu_step_compile.log"; then
    verdict[step]="FAIL (PyTorch side: exit $rc_p, compiled $rc_c; $(grep -h -m1 -E 'skipped|failed' "$logs/gpu_step_py.log" "$logs/gpu_step_compile.log" | head -1))"
  else
    verdict[step]=PASS
  fi
}

part_gemm() {
  local t rc_m rc_p
  t=$(allowed gemm)
  run_bench cuda_gemm_bench $((t / 2)) "$bin/cuda_gemm_bench" --benchmark_min_time=0.05 \
    --benchmark_out="$logs/cuda_gemm.json" --benchmark_out_format=json
  rc_m=$?
  run_bench gpu_gemm_py $((t / 2)) "$python" "$root/bench/pytorch/gpu_gemm.py" --mantissa-json "$logs/cuda_gemm.json"
  rc_p=$?
  say ""
  if [[ $gpu -eq 0 ]]; then
    cat "$logs/cuda_gemm_bench.log" "$logs/gpu_gemm_py.log" | fence
    verdict[gemm]="SKIPPED (no GPU)"
    detail[gemm]="$(skip_line "$logs/cuda_gemm_bench.log" || echo "cuda_gemm_bench: exit $rc_m"); $(skip_line "$logs/gpu_gemm_py.log" || echo "gpu_gemm.py: exit $rc_p")"
    return
  fi
  sed -n '/^| dtype /,$p' "$logs/gpu_gemm_py.log" >>"$body"
  say ""
  say "cuda_gemm_bench's console output:"
  fence <"$logs/cuda_gemm_bench.log"
  detail[gemm]="ratio = mantissa TFLOP/s / cuBLAS (PyTorch) TFLOP/s; $(grep -m1 '^best bf16' "$logs/gpu_gemm_py.log")"
  if [[ $rc_m -ne 0 || ! -s $logs/cuda_gemm.json ]]; then
    verdict[gemm]="FAIL (cuda_gemm_bench exit $rc_m, $([[ -s $logs/cuda_gemm.json ]] && echo "JSON written" || echo "no JSON"))"
  elif [[ $rc_p -ne 0 ]] || ! grep -q '^| dtype ' "$logs/gpu_gemm_py.log"; then
    verdict[gemm]="FAIL (gpu_gemm.py exit $rc_p$(grep -m1 -o 'skipped.*' "$logs/gpu_gemm_py.log" | sed 's/^/: /'))"
  elif grep -q 'ERROR OCCURRED\|"error_occurred": true' "$logs/cuda_gemm_bench.log" "$logs/cuda_gemm.json"; then
    verdict[gemm]="FAIL (a cuda_gemm_bench case reported an error)"
  else
    verdict[gemm]=PASS
  fi
}

part_fp8acc() {
  local t rc_p rc_f
  t=$(allowed fp8acc)
  if [[ $gpu -eq 0 ]]; then
    verdict[fp8acc]="SKIPPED (no GPU)"
    detail[fp8acc]=$no_gpu_reason
    say "skipped: $no_gpu_reason."
    return
  fi
  # The record goes to $OUT too (about 11 MB), so that a new GPU's can be kept beside bench/gpu/2026-11-28's.
  run_bench fp8_accum_probe $((t / 2)) "$python" "$root/bench/gpu/fp8_accum_probe.py" --out "$out"
  rc_p=$?
  run_bench fp8_accum_fit $((t / 2)) "$python" "$root/bench/gpu/fp8_accum_fit.py" "$out"
  rc_f=$?
  say ""
  tail -n 3 "$logs/fp8_accum_probe.log" | fence
  fence <"$logs/fp8_accum_fit.log"
  detail[fp8acc]="$(tail -n 1 "$logs/fp8_accum_fit.log")"
  if [[ $rc_p -ne 0 ]]; then
    verdict[fp8acc]="FAIL (fp8_accum_probe.py exit $rc_p)"
  elif [[ $rc_f -ne 0 ]]; then
    verdict[fp8acc]="FAIL (the model differs: see the mismatched cases)"
  else
    verdict[fp8acc]=PASS
  fi
}

# --- run -----------------------------------------------------------------------------------------------------
note "parts: ${parts[*]}; budget ${budget} s; GPU: $([[ $gpu -eq 1 ]] && echo "$gpu_list" | head -1 || echo "none")"
for part in "${parts[@]}"; do
  part_start=$(elapsed)
  section "$part"
  if [[ $(allowed "$part") -eq 0 ]]; then
    verdict[$part]="NOT RUN (budget spent)"
    detail[$part]="$(elapsed) of ${budget} s used before it"
    say "not run: $(elapsed) of the call's ${budget} s were used before it."
  else
    note "$part ..."
    "part_$part"
  fi
  seconds[$part]=$(($(elapsed) - part_start))
  note "$part: ${verdict[$part]} (${seconds[$part]} s)"
done
for cmd in "${also[@]}"; do
  name=${cmd%% *}
  printf '\n## also: %s\n\n' "$cmd" >>"$body"
  # shellcheck disable=SC2086
  run_bench "also_$name" 600 $bin/$cmd
  rc=$?
  fence <"$logs/also_$name.log"
  say "exit status $rc"
done

# --- the report file -----------------------------------------------------------------------------------------
{
  echo "# mantissa device check"
  echo
  echo "- call: $(date -u '+%Y-%m-%d %H:%M UTC'), parts: ${parts[*]}, $(elapsed) of ${budget} s, on $(hostname); $([[ $gpu -eq 1 ]] && echo "$gpu_list" | head -1 | sed 's/ (UUID.*//' || echo "REHEARSAL, $no_gpu_reason")"
  echo "- bundle: $(tr '\n' ' ' <"$work/bundle/BUILD_INFO" 2>/dev/null || echo "no BUILD_INFO")"
  echo
  echo "## Machine"
  echo
  echo "nvidia-smi -L:"
  echo '```'
  echo "$gpu_list"
  echo '```'
  echo
  if [[ $gpu -eq 1 ]]; then
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | head -1)"
    echo "- nvidia-smi: $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)"
  fi
  echo "- nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*, V[0-9.]*' || echo "not found")"
  echo "- compute-sanitizer: ${sanitizer:-not found}$([[ -n $sanitizer ]] && echo " ($("$sanitizer" --version 2>/dev/null | grep -o 'Version [0-9.]*' | head -1))")"
  echo "- Python: $python ($("$python" -c 'import sys; print(sys.version.split()[0])' 2>&1 | tail -1)), torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "not installed")"
  echo "- CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "- libraries mantissa_tests loads (ldd) and the versions they report:"
  # cudart opens the driver's libcuda.so.1 at run time (ldd does not list it): ask the loader for it by name.
  v=$(lib_version cuda libcuda.so.1)
  where=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / { print $NF; exit }')
  echo "  - libcuda.so.1 (the driver's, opened by cudart): ${where:-not in the ldconfig cache}$([[ -n $v ]] && echo ", version $v" || echo ", not loadable")"
  for l in libcudart.so libcublas.so libcublasLt.so libcudnn.so libnccl.so; do
    path=$(lib_of "$l")
    case $l in
      libcudart.so) v=$([[ -n $path && $path != "not found" ]] && lib_version cudart "$path") ;;
      libcublas.so) v=$([[ -n $path && $path != "not found" ]] && lib_version cublas "$path") ;;
      libcudnn.so) v=$([[ -n $path && $path != "not found" ]] && lib_version cudnn "$path") ;;
      libnccl.so) v=$([[ -n $path && $path != "not found" ]] && lib_version nccl "$path") ;;
      *) v="" ;;
    esac
    echo "  - $l: ${path:-not linked}${v:+, version $v}"
  done
  missing=$("${benv[@]}" ldd "$bin/mantissa_tests" 2>&1 | grep 'not found')
  [[ -n $missing ]] && echo "- MISSING LIBRARIES: $(echo "$missing" | awk '{print $1}' | paste -sd' ')"
  echo
  echo "## Summary"
  echo
  echo "| part | verdict | seconds | detail |"
  echo "|---|---|---:|---|"
  for part in "${parts[@]}"; do
    echo "| $part | ${verdict[$part]:-?} | ${seconds[$part]:-0} | ${detail[$part]:-} |"
  done
  cat "$body"
} >"$report"
tar -C "$(dirname "$logs")" -czf "$out/device_check_logs.tar.gz" "$(basename "$logs")"
note "report: $report; logs: $out/device_check_logs.tar.gz"
cat "$report"

status=0
for part in "${parts[@]}"; do
  case ${verdict[$part]:-} in FAIL* | "NOT RUN"*) status=1 ;; esac
done
exit $status
