// One whole MLP training step (784-1024-1024-10, batch 256): forward, mean cross-entropy, backward and
// an Adam update (BM_MlpStep, the one compared with PyTorch) or an SGD-momentum update (BM_MlpStepSGD);
// f32, and bf16 under autocast over fp32 masters. The PyTorch side of the same step is
// bench/pytorch/mlp_step.py; bench/compare_pytorch.sh runs both and prints the ratios.
#include <benchmark/benchmark.h>

#include <memory>

#include "amp/autocast.h"
#include "framework/allocator.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/loss.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

enum class Precision { kF32, kBF16Autocast, kBF16WorkingCopies };
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
  // Working copies: the step refreshes bf16 copies of the weights; the forward then casts nothing.
  if (precision == Precision::kBF16WorkingCopies) opt.enable_working_copies(DType::kBF16);
  Generator gen(1);
  const Tensor x = randn({kBatch, 784}, {}, &gen);
  std::vector<int64_t> labels(kBatch);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(gen.next_u32() % 10);
  const Tensor y = from_vector<int64_t>(labels, {kBatch});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    if (precision == Precision::kF32) {
      loss = cross_entropy(model.forward(x), y);
    } else {
      amp::AutocastGuard guard({.dtype = DType::kBF16});
      loss = cross_entropy(model.forward(x), y);
    }
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();  // warm the allocator cache and the oneDNN primitive cache
  const uint64_t sys_before = cpu_allocator_stats().system_allocations;
  for (auto _ : state) {
    Tensor loss = step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);  // items_per_second = samples/s
  // A steady-state step should take no memory from the operating system (caching allocator).
  state.counters["os_allocs_per_step"] = benchmark::Counter(
      static_cast<double>(cpu_allocator_stats().system_allocations - sys_before) / static_cast<double>(state.iterations()));
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
