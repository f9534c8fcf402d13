// One whole MLP training step (784-1024-1024-10, batch 256): forward, mean cross-entropy, backward and
// an Adam update (BM_MlpStep, the one compared with PyTorch) or an SGD-momentum update (BM_MlpStepSGD);
// f32, and bf16 under autocast over fp32 masters. The PyTorch side of the same step is
// bench/pytorch/mlp_step.py; bench/compare_pytorch.sh runs both and prints the ratios.
#include <benchmark/benchmark.h>

#include <memory>

#include "bench/training_step.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

using bench::Precision;
enum class Opt { kAdam, kSGD };

constexpr int64_t kBatch = 256;

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
  Optimizer& opt = *owned;
  Generator gen(1);
  const Tensor x = randn({kBatch, 784}, {}, &gen);
  const Tensor y = bench::random_labels(kBatch, 10, gen);
  bench::time_training_step(
      state, precision, opt, kBatch, [&](const Tensor& in) { return model.forward(in); }, x, y);
}

void BM_MlpStep(benchmark::State& state, Precision precision) { run_step(state, precision, Opt::kAdam); }
void BM_MlpStepSGD(benchmark::State& state, Precision precision) { run_step(state, precision, Opt::kSGD); }

BENCHMARK_CAPTURE(BM_MlpStep, f32, Precision::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpStep, bf16_autocast, Precision::kBF16Autocast)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpStep, bf16_autocast_working_copies, Precision::kBF16WorkingCopies)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpStepSGD, f32, Precision::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpStepSGD, bf16_autocast, Precision::kBF16Autocast)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpStepSGD, bf16_autocast_working_copies, Precision::kBF16WorkingCopies)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
