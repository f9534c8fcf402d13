// One whole CNN training step (models/cnn.h, batch 128, [128, 1, 28, 28] inputs): forward, mean
// cross-entropy, backward and an Adam update; f32, and bf16 under autocast over fp32 masters (re-casting
// the weights every forward, or with the optimizer's persistent bf16 working copies). The PyTorch side of
// the same step is bench/pytorch/cnn_step.py; bench/compare_pytorch.sh runs both and prints the ratios.
#include <benchmark/benchmark.h>

#include "bench/training_step.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

using bench::Precision;

constexpr int64_t kBatch = 128;

void BM_CnnStep(benchmark::State& state, Precision precision) {
  Generator init(0);
  CNN model({.generator = &init});
  model.train();
  Adam opt(model.named_parameters(), {.lr = 1e-3});
  Generator gen(1);
  const Tensor x = randn({kBatch, 1, CNN::kImageSize, CNN::kImageSize}, {}, &gen);
  const Tensor y = bench::random_labels(kBatch, 10, gen);
  bench::time_training_step(
      state, precision, opt, kBatch, [&](const Tensor& in) { return model.forward(in); }, x, y);
}

BENCHMARK_CAPTURE(BM_CnnStep, f32, Precision::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_CnnStep, bf16_autocast, Precision::kBF16Autocast)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_CnnStep, bf16_autocast_working_copies, Precision::kBF16WorkingCopies)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
