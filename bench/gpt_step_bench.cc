// One whole training step of a GPT (models/gpt.h, no dropout) on the CPU: forward with the mean cross-entropy
// over every position, backward and an Adam update; over fp32 masters (training_step.h). Two shapes:
//   BM_GptStep      the character GPT (vocab 65, n_layer 4, n_head 4, n_embd 256, block 128), batch 32; f32,
//                   bf16 autocast and fp16 autocast with a GradScaler;
//   BM_Gpt2sStep    GPT-2 small (124M parameters: vocab 50257, n_layer 12, n_head 12, n_embd 768, block 1024),
//                   batch 1 (1024 tokens: seconds per step on 2 cores, about 5 GiB); f32 and bf16 autocast,
//                   3 timed steps after 1 warm-up step per run.
// The PyTorch side of the same steps is bench/pytorch/train_step.py --model gpt / gpt2s; bench/compare_pytorch.sh
// runs both and prints the ratios. (gpu_step_bench is the GPT-2-small step on a GPU.)
#include <benchmark/benchmark.h>

#include "bench/training_step.h"
#include "framework/random.h"
#include "models/gpt.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

using bench::Precision;

constexpr int64_t kBatch = 32;
const GPTConfig kConfig{.vocab_size = 65, .n_layer = 4, .n_head = 4, .n_embd = 256, .block_size = 128};
constexpr int64_t kGpt2sBatch = 1;
const GPTConfig kGpt2sConfig{.vocab_size = 50257, .n_layer = 12, .n_head = 12, .n_embd = 768, .block_size = 1024};

// Multiply-adds per token of one forward: per block the four linears (12 C^2) and attention's two
// products (2 T C, counted over the whole T x T square, as PyTorch's FLOP counter counts SDPA); the tied
// lm_head (C V). A step is three forwards' worth (the forward, input and weight gradients). For GPT-2 small at
// T = 1024: 0.854 GFLOP per token, 875 GFLOP per step of one sequence.
double step_flops(const GPTConfig& c, int64_t batch) {
  const double per_token =
      static_cast<double>(c.n_layer) * (12.0 * c.n_embd * c.n_embd + 2.0 * c.block_size * c.n_embd) +
      static_cast<double>(c.n_embd * c.vocab_size);
  return 3.0 * 2.0 * per_token * static_cast<double>(batch * c.block_size);
}

void run_step(benchmark::State& state, Precision precision, const GPTConfig& config, int64_t batch, int warmup) {
  Generator init(0);
  GPT model(config, {.generator = &init});
  model.train();
  Adam opt(model.named_parameters(), {.lr = 1e-3});
  Generator gen(1);
  const int64_t tokens = batch * config.block_size;
  const Tensor idx = bench::random_labels(tokens, config.vocab_size, gen).reshape({batch, config.block_size});
  const Tensor targets = bench::random_labels(tokens, config.vocab_size, gen).reshape({batch, config.block_size});
  bench::time_training_step(
      state, precision, opt, batch, step_flops(config, batch), [&] { return model.forward(idx, targets).loss; },
      warmup);
}

void BM_GptStep(benchmark::State& state, Precision precision) { run_step(state, precision, kConfig, kBatch, 3); }

void BM_Gpt2sStep(benchmark::State& state, Precision precision) {
  run_step(state, precision, kGpt2sConfig, kGpt2sBatch, 1);
}

bool register_all() {
  bench::register_precisions("BM_GptStep", BM_GptStep);
  // A step takes seconds: a fixed 3 timed steps instead of Google Benchmark's time-based count.
  bench::register_precisions("BM_Gpt2sStep", BM_Gpt2sStep, {"f32", "bf16_autocast", "bf16_autocast_working_copies"}, 3);
  return true;
}
const bool registered = register_all();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
