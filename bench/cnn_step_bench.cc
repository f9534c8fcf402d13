// One whole CNN training step (models/cnn.h, batch 128, [128, 1, 28, 28] inputs): forward, mean
// cross-entropy, backward and an Adam update; f32, bf16 autocast and fp16 autocast with a GradScaler, over
// fp32 masters (training_step.h). The PyTorch side of the same step is bench/pytorch/train_step.py
// --model cnn; bench/compare_pytorch.sh runs both and prints the ratios.
#include <benchmark/benchmark.h>

#include "bench/training_step.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

using bench::Precision;

constexpr int64_t kBatch = 128;

// Multiply-adds of one forward: conv1 (26x26x32 outputs of 1x3x3), conv2 (11x11x64 of 32x3x3), fc1, fc2.
constexpr double kConv1Macs = kBatch * 26.0 * 26 * 32 * 9;
constexpr double kForwardMacs = kConv1Macs + kBatch * (11.0 * 11 * 64 * 288 + 1600 * 128 + 128 * 10);
// A step: the forward, the weight gradients, and the input gradients of all but conv1 (its input is data).
constexpr double kStepFlops = 2.0 * (2 * kForwardMacs + (kForwardMacs - kConv1Macs));

void BM_CnnStep(benchmark::State& state, Precision precision) {
  Generator init(0);
  CNN model({.generator = &init});
  model.train();
  Adam opt(model.named_parameters(), {.lr = 1e-3});
  Generator gen(1);
  const Tensor x = randn({kBatch, 1, CNN::kImageSize, CNN::kImageSize}, {}, &gen);
  const Tensor y = bench::random_labels(kBatch, 10, gen);
  bench::time_training_step(state, precision, opt, kBatch, kStepFlops,
                            [&] { return cross_entropy(model.forward(x), y); });
}

const bool registered = (bench::register_precisions("BM_CnnStep", BM_CnnStep), true);

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
