// What the whole-training-step benchmarks (mlp_step_bench, cnn_step_bench) share: the precisions they
// compare, random labels, and the timed loop of forward + mean cross-entropy + backward + optimizer step
// with its samples/s and OS-allocation counters.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <vector>

#include "amp/autocast.h"
#include "framework/allocator.h"
#include "framework/generator.h"
#include "ops/loss.h"
#include "optim/optimizer.h"

namespace mantissa::bench {

// bf16 under autocast over fp32 masters, re-casting the weights every forward, or with the optimizer's
// persistent bf16 working copies (the forward then casts nothing).
enum class Precision { kF32, kBF16Autocast, kBF16WorkingCopies };

inline Tensor random_labels(int64_t n, int64_t classes, Generator& gen) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t& l : labels) l = static_cast<int64_t>(gen.next_u32() % static_cast<uint32_t>(classes));
  return from_vector<int64_t>(labels, {n});
}

// Times steps of cross_entropy(forward(x), y) on one fixed batch of `batch` examples.
inline void time_training_step(benchmark::State& state, Precision precision, Optimizer& opt, int64_t batch,
                               const std::function<Tensor(const Tensor&)>& forward, const Tensor& x, const Tensor& y) {
  if (precision == Precision::kBF16WorkingCopies) opt.enable_working_copies(DType::kBF16);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    if (precision == Precision::kF32) {
      loss = cross_entropy(forward(x), y);
    } else {
      amp::AutocastGuard guard({.dtype = DType::kBF16});
      loss = cross_entropy(forward(x), y);
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
  state.SetItemsProcessed(state.iterations() * batch);  // items_per_second = samples/s
  // A steady-state step should take no memory from the operating system (caching allocator).
  state.counters["os_allocs_per_step"] =
      benchmark::Counter(static_cast<double>(cpu_allocator_stats().system_allocations - sys_before) /
                         static_cast<double>(state.iterations()));
}

}  // namespace mantissa::bench
