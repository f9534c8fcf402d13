#!/bin/sh
# ctest for the mantissa-train program: --help lists every flag with its default; a bad flag or value exits
# 2 with one line naming it; missing or corrupt data exits 1 naming the file; short runs of each model on
# synthetic data and of the GPT on a small text write the metrics the issue specifies.
#   train_program_test.sh PATH/TO/mantissa-train
set -u
prog=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/train_program_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
ok() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; failures=$((failures + 1)); }

# --help: exit 0, every flag of the issue with "(default: ...)".
if "$prog" --help >"$work/help" 2>&1; then ok "--help exits 0"; else fail "--help exit status"; fi
for flag in model data data_path mlp_hidden n_layer n_head n_embd block_size precision optimizer lr momentum \
    weight_decay batch_size epochs max_steps grad_accum clip_grad_norm init_scale growth_factor backoff_factor \
    growth_interval hysteresis min_scale seed threads eval_every checkpoint_dir checkpoint_every resume metrics; do
  grep -q -- "--$flag .*(default: " "$work/help" || fail "--help does not list --$flag with its default"
done

# Bad input: status 2, exactly one line on stderr, naming the flag.
expect_usage_error() {  # expect_usage_error WORD-IN-MESSAGE ARGS...
  word=$1
  shift
  "$prog" "$@" >"$work/out" 2>"$work/err"
  status=$?
  lines=$(wc -l <"$work/err")
  if [ "$status" -eq 2 ] && [ "$lines" -eq 1 ] && grep -q -- "$word" "$work/err"; then
    ok "$* -> exit 2: $(cat "$work/err")"
  else
    fail "$* -> exit $status, $lines stderr lines: $(cat "$work/err")"
  fi
}
expect_usage_error "unknown flag --bogus" --bogus=1
expect_usage_error "--lr=abc" --lr=abc
expect_usage_error "--lr must be > 0" --lr=-1
expect_usage_error "--precision=fp4: expected fp32 | fp16 | bf16 | fp8" --precision=fp4
expect_usage_error "--fp8_recipe=delayed:history=0" --precision=fp8 --fp8_recipe=delayed:history=0
expect_usage_error "\"margin\" is not an option of the mxfp8 recipe" --precision=fp8 --fp8_recipe=mxfp8:margin=1
expect_usage_error "no 32-element block scaling for --fp8_recipe=mxfp4" --precision=fp8 --fp8_recipe=mxfp4 \
  --fp8_accumulator=hopper
expect_usage_error "--model=rnn" --model=rnn
expect_usage_error "--batch_size must be > 0" --batch_size=0
expect_usage_error "--mlp_hidden" --mlp_hidden=256,x
expect_usage_error "does not fit --model=gpt" --model=gpt --data=fashion-mnist
expect_usage_error "--n_embd (130) must be a multiple of --n_head (4)" --model=gpt --n_embd=130
expect_usage_error "--backoff_factor" --backoff_factor=1.5
expect_usage_error "unexpected argument 'extra'" extra
expect_usage_error "--resume=latest needs --checkpoint_dir" --resume=latest
expect_usage_error "--device=gpu: expected cpu, cuda or cuda:N" --device=gpu

# A GPU that is not there: status 1 and the device named (skipped on a machine with 9 GPUs or more).
"$prog" --device=cuda:8 --data=synthetic --max_steps=1 --progress=none >"$work/out" 2>"$work/err"
status=$?
if [ "$status" -eq 1 ] && grep -q -- "--device=cuda:8: .* CUDA devices present" "$work/err"; then ok "missing GPU: $(cat "$work/err")"
else fail "missing GPU -> exit $status: $(cat "$work/err")"; fi

# Bad data: status 1 and the file named.
"$prog" --data_path="$work/none" --progress=none >"$work/out" 2>"$work/err"
status=$?
if [ "$status" -eq 1 ] && grep -q "$work/none" "$work/err"; then ok "missing data: $(cat "$work/err")"
else fail "missing data -> exit $status: $(cat "$work/err")"; fi
mkdir -p "$work/corrupt"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  printf 'not gzip, not idx' >"$work/corrupt/$f"
done
"$prog" --data_path="$work/corrupt" --progress=none >"$work/out" 2>"$work/err"
status=$?
if [ "$status" -eq 1 ] && grep -q "$work/corrupt/train-images-idx3-ubyte.gz" "$work/err"; then
  ok "corrupt data: $(cat "$work/err")"
else fail "corrupt data -> exit $status: $(cat "$work/err")"; fi

# Short runs write one line per step, the evaluations and a summary.
run_and_check() {  # run_and_check NAME STEPS ARGS...
  name=$1 steps=$2
  shift 2
  if ! "$prog" --progress=lines --max_steps="$steps" --metrics="$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1; then
    fail "$name: exit status $?"; cat "$work/$name.out"; return
  fi
  n=$(grep -c '^{"step": ' "$work/$name.jsonl")
  [ "$n" -eq "$steps" ] || fail "$name: $n step lines, expected $steps"
  grep -q '^{"event": "eval", "step": ' "$work/$name.jsonl" || fail "$name: no eval line"
  grep -q '^{"event": "summary", "steps": '"$steps"', "skipped_steps": [0-9]*, "final_scale": [0-9.e+]*, "\(test_accuracy\|val_loss\)": [0-9.e+-]*, "samples_per_s": [0-9.e+]*, "wall_s": [0-9.e+-]*}$' \
    "$work/$name.jsonl" || fail "$name: summary line malformed: $(tail -1 "$work/$name.jsonl")"
  # Losses carry 9 significant digits (float32 round-trips).
  grep -q '"loss": [0-9]\.[0-9]\{8\}[,}]' "$work/$name.jsonl" || fail "$name: losses not written with 9 digits"
  grep -q 'run summary' "$work/$name.out" || fail "$name: no summary printed"
  ok "$name"
}
run_and_check mlp 6 --data=synthetic --precision=fp16 --mlp_hidden=64 --eval_batches=2
run_and_check cnn 3 --model=cnn --data=synthetic --precision=bf16 --batch_size=16 --eval_batches=1
run_and_check gpt 4 --model=gpt --data=synthetic --n_layer=1 --n_embd=32 --block_size=16 --batch_size=4 \
  --eval_every=2 --eval_batches=2 --precision=fp32 --sample_chars=0
printf 'The quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs.\n%.0s' \
  1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 >"$work/text.txt"
run_and_check text 4 --model=gpt --data=text --data_path="$work/text.txt" --n_layer=1 --n_embd=32 \
  --block_size=16 --batch_size=4 --eval_every=2 --eval_batches=2 --precision=bf16 --sample_chars=40
grep -q -- '--- sample ---' "$work/text.out" || fail "text: no generated sample printed"

# Bad checkpoints: status 1 and a message naming the file and the problem; nothing trains.
expect_run_error() {  # expect_run_error WORDS ARGS...
  word=$1
  shift
  "$prog" --progress=none "$@" >"$work/out" 2>"$work/err"
  status=$?
  if [ "$status" -eq 1 ] && grep -q -- "$word" "$work/err"; then ok "$* -> exit 1: $(cat "$work/err")"
  else fail "$* -> exit $status: $(cat "$work/err")"; fi
}
expect_run_error "$work/none.h5" --data=synthetic --mlp_hidden=16 --resume="$work/none.h5"
"$prog" --progress=none --data=synthetic --mlp_hidden=16 --max_steps=2 --checkpoint_dir="$work/ck" >/dev/null 2>&1 ||
  fail "writing a checkpoint"
expect_run_error "step_2.h5: /model/layers.0.weight has shape \[16, 784\], the model expects \[32, 784\]" \
  --data=synthetic --mlp_hidden=32 --checkpoint_dir="$work/ck" --resume=latest
expect_run_error "written by a run in fp16; this run is in bf16" --data=synthetic --mlp_hidden=16 --precision=bf16 \
  --checkpoint_dir="$work/ck" --resume=latest
expect_run_error "SGD" --data=synthetic --mlp_hidden=16 --optimizer=sgd --checkpoint_dir="$work/ck" --resume=latest
head -c 3000 "$work/ck/step_2.h5" >"$work/truncated.h5"
expect_run_error "$work/truncated.h5" --data=synthetic --mlp_hidden=16 --resume="$work/truncated.h5"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
