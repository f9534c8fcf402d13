// One whole training step of the character GPT (models/gpt.h: vocab 65, n_layer 4, n_head 4, n_embd 256,
// block 128; batch 32, no dropout) on the CPU: forward with the mean cross-entropy over all 4096 positions,
// backward and an Adam update; f32, bf16 autocast and fp16 autocast with a GradScaler, over fp32 masters
// (training_step.h). The PyTorch side of the same step is bench/pytorch/train_step.py --model gpt;
// bench/compare_pytorch.sh runs both and prints the ratios. (gpu_step_bench is the GPT-2-small step on a GPU.)
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

// Multiply-adds per token of one forward: per block the four linears (12 C^2) and attention's two
// products (2 T C, counted over the whole T x T square, as PyTorch's FLOP counter counts SDPA); the tied
// lm_head (C V). A step is three forwards' worth (the forward, input and weight gradients).
double step_flops(const GPTConfig& c) {
  const double per_token =
      static_cast<double>(c.n_layer) * (12.0 * c.n_embd * c.n_embd + 2.0 * c.block_size * c.n_embd) +
      static_cast<double>(c.n_embd * c.vocab_size);
  return 3.0 * 2.0 * per_token * static_cast<double>(kBatch * c.block_size);
}

void BM_GptStep(benchmark::State& state, Precision precision) {
  Generator init(0);
  GPT model(kConfig, {.generator = &init});
  model.train();
  Adam opt(model.named_parameters(), {.lr = 1e-3});
  Generator gen(1);
  const int64_t tokens = kBatch * kConfig.block_size;
  const Tensor idx = bench::random_labels(tokens, kConfig.vocab_size, gen).reshape({kBatch, kConfig.block_size});
  const Tensor targets = bench::random_labels(tokens, kConfig.vocab_size, gen).reshape({kBatch, kConfig.block_size});
  bench::time_training_step(state, precision, opt, kBatch, step_flops(kConfig),
                            [&] { return model.forward(idx, targets).loss; });
}

const bool registered = (bench::register_precisions("BM_GptStep", BM_GptStep), true);

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
