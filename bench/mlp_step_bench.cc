// One whole MLP training step (784-1024-1024-10, batch 256): forward, mean cross-entropy, backward and
// an SGD-momentum update; f32, and bf16 under autocast over fp32 masters. The PyTorch side of the same
// step is bench/pytorch/mlp_step.py; bench/compare_pytorch.sh runs both and prints the ratios.
#include <benchmark/benchmark.h>

#include <memory>

#include "amp/autocast.h"
#include "framework/allocator.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/loss.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

enum class Precision { kF32, kBF16Autocast, kBF16WorkingCopies };

void BM_MlpStep(benchmark::State& state, Precision precision) {
  manual_seed(0);
  Sequential model(std::make_shared<Linear>(784, 1024), std::make_shared<ReLU>(), std::make_shared<Linear>(1024, 1024),
                   std::make_shared<ReLU>(), std::make_shared<Linear>(1024, 10));
  SGD opt(model.named_parameters(), {.lr = 0.01, .momentum = 0.9});
  // Working copies: the step refreshes bf16 copies of the weights; the forward then casts nothing.
  if (precision == Precision::kBF16WorkingCopies) opt.enable_working_copies(DType::kBF16);
  Generator gen(1);
  const Tensor x = randn({256, 784}, {}, &gen);
  std::vector<int64_t> labels(256);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(gen.next_u32() % 10);
  const Tensor y = from_vector<int64_t>(labels, {256});
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
  // A steady-state step should take no memory from the operating system (caching allocator).
  state.counters["os_allocs_per_step"] = benchmark::Counter(
      static_cast<double>(cpu_allocator_stats().system_allocations - sys_before) / static_cast<double>(state.iterations()));
}

BENCHMARK_CAPTURE(BM_MlpStep, f32, Precision::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpStep, bf16_autocast, Precision::kBF16Autocast)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MlpStep, bf16_autocast_working_copies, Precision::kBF16WorkingCopies)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
