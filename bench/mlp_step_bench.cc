// One whole MLP training step (784-1024-1024-10, batch 256): forward, mean cross-entropy, backward and
// an Adam update (BM_MlpStep, the one compared with PyTorch) or an SGD-momentum update (BM_MlpStepSGD);
// f32, bf16 autocast and fp16 autocast with a GradScaler, over fp32 masters (training_step.h). The PyTorch
// side of the same step is bench/pytorch/train_step.py --model mlp; bench/compare_pytorch.sh runs both and
// prints the ratios.
#include <benchmark/benchmark.h>

#include <memory>

#include "bench/training_step.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

using bench::Precision;
enum class Opt { kAdam, kSGD };

constexpr int64_t kBatch = 256;

// GEMM FLOPs of one step: forward and weight gradients of the three layers, input gradients of the last
// two (the first layer's input, the data, needs none).
constexpr double kStepFlops = 2.0 * kBatch * (2.0 * (784 * 1024 + 1024 * 1024 + 1024 * 10) + (1024 * 1024 + 1024 * 10));

void run_step(benchmark::State& state, Precision precision, Opt which) {
  manual_seed(0);
  Sequential model(std::make_shared<Linear>(784, 1024), std::make_shared<ReLU>(), std::make_shared<Linear>(1024, 1024),
                   std::make_shared<ReLU>(), std::make_shared<Linear>(1024, 10));
  std::unique_ptr<Optimizer> owned;
  if (which == Opt::kAdam) {
    owned = std::make_unique<Adam>(model.named_parameters(), AdamOptions{.lr = 1e-3});
  } else {
    owned = std::make_unique<SGD>(model.named_parameters(), SGDOptions{.lr = 0.01, .momentum = 0.9});
  }
  Generator gen(1);
  const Tensor x = randn({kBatch, 784}, {}, &gen);
  const Tensor y = bench::random_labels(kBatch, 10, gen);
  bench::time_training_step(state, precision, *owned, kBatch, kStepFlops,
                            [&] { return cross_entropy(model.forward(x), y); });
}

void BM_MlpStep(benchmark::State& state, Precision precision) { run_step(state, precision, Opt::kAdam); }
void BM_MlpStepSGD(benchmark::State& state, Precision precision) { run_step(state, precision, Opt::kSGD); }

const bool registered = [] {
  bench::register_precisions("BM_MlpStep", BM_MlpStep);
  bench::register_precisions("BM_MlpStepSGD", BM_MlpStepSGD);
  return true;
}();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
