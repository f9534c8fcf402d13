// One whole CNN training step (models/cnn.h, batch 128, [128, 1, 28, 28] inputs): forward, mean
// cross-entropy, backward and an Adam update; f32, and bf16 under autocast over fp32 masters (re-casting
// the weights every forward, or with the optimizer's persistent bf16 working copies). The PyTorch side of
// the same step is bench/pytorch/cnn_step.py; bench/compare_pytorch.sh runs both and prints the ratios.
#include <benchmark/benchmark.h>

#include <vector>

#include "amp/autocast.h"
#include "framework/allocator.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "ops/loss.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

enum class Precision { kF32, kBF16Autocast, kBF16WorkingCopies };

constexpr int64_t kBatch = 128;

void BM_CnnStep(benchmark::State& state, Precision precision) {
  Generator init(0);
  CNN model({.generator = &init});
  model.train();
  Adam opt(model.named_parameters(), {.lr = 1e-3});
  if (precision == Precision::kBF16WorkingCopies) opt.enable_working_copies(DType::kBF16);
  Generator gen(1);
  const Tensor x = randn({kBatch, 1, CNN::kImageSize, CNN::kImageSize}, {}, &gen);
  std::vector<int64_t> labels(kBatch);
  for (auto& l : labels) l = static_cast<int64_t>(gen.next_u32() % 10);
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
  for (int i = 0; i < 3; ++i) step();  // warm the allocator cache and the oneDNN primitive caches
  const uint64_t sys_before = cpu_allocator_stats().system_allocations;
  for (auto _ : state) {
    Tensor loss = step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);  // items_per_second = samples/s
  state.counters["os_allocs_per_step"] = benchmark::Counter(
      static_cast<double>(cpu_allocator_stats().system_allocations - sys_before) / static_cast<double>(state.iterations()));
}

BENCHMARK_CAPTURE(BM_CnnStep, f32, Precision::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_CnnStep, bf16_autocast, Precision::kBF16Autocast)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_CnnStep, bf16_autocast_working_copies, Precision::kBF16WorkingCopies)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
