// What the whole-training-step benchmarks (mlp_step_bench, cnn_step_bench, gpt_step_bench) share: the
// precisions they compare, random labels, and the timed loop of zero_grad + forward and loss + backward +
// optimizer step with its samples/s, model FLOP rate and OS-allocation counters.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/allocator.h"
#include "framework/generator.h"
#include "optim/optimizer.h"

namespace mantissa::bench {

// How a step runs: f32; or autocast to `autocast` over fp32 masters, re-casting the weights every forward
// or, with `working_copies`, from the optimizer's persistent 16-bit copies (the forward then casts no
// weight). fp16 also scales the loss with a GradScaler (scale, step with its inf check, update), as
// PyTorch's torch.amp.GradScaler("cpu") does; bf16 needs no scaler.
struct Precision {
  std::optional<DType> autocast;
  bool working_copies = false;
};
inline constexpr Precision kF32{};
inline constexpr Precision kBF16{DType::kBF16};
inline constexpr Precision kBF16WorkingCopies{DType::kBF16, true};
inline constexpr Precision kF16Scaled{DType::kF16};
inline constexpr Precision kF16ScaledWorkingCopies{DType::kF16, true};

inline Tensor random_labels(int64_t n, int64_t classes, Generator& gen) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t& l : labels) l = static_cast<int64_t>(gen.next_u32() % static_cast<uint32_t>(classes));
  return from_vector<int64_t>(labels, {n});
}

// Times steps of loss() (forward and mean loss on one fixed batch of `batch` examples), backward and
// `opt`'s update, after `warmup` untimed steps. `model_flops` is the multiply-adds x 2 of one step's GEMMs and
// convolutions (forward and backward), reported as the counter model_GFLOPs (per second, from the real time)
// and, per step, as step_GFLOP (for a fraction of peak at any step time).
inline void time_training_step(benchmark::State& state, Precision precision, Optimizer& opt, int64_t batch,
                               double model_flops, const std::function<Tensor()>& loss_fn, int warmup = 3) {
  if (precision.working_copies) opt.enable_working_copies(*precision.autocast);
  const bool scaled = precision.autocast == DType::kF16;
  amp::GradScaler scaler(scaled ? amp::scaler_defaults_for(DType::kF16) : amp::GradScalerOptions{});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    if (!precision.autocast) {
      loss = loss_fn();
    } else {
      amp::AutocastGuard guard({.dtype = *precision.autocast});
      loss = loss_fn();
    }
    if (scaled) {
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    } else {
      loss.backward();
      opt.step();
    }
    return loss;
  };
  for (int i = 0; i < warmup; ++i) step();  // warm the allocator cache and the oneDNN primitive caches
  const uint64_t sys_before = cpu_allocator_stats().system_allocations;
  for (auto _ : state) {
    Tensor loss = step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  state.SetItemsProcessed(state.iterations() * batch);  // items_per_second = samples/s
  state.counters["model_GFLOPs"] =
      benchmark::Counter(model_flops * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["step_GFLOP"] = benchmark::Counter(model_flops * 1e-9);
  // A steady-state step should take no memory from the operating system (caching allocator).
  state.counters["os_allocs_per_step"] =
      benchmark::Counter(static_cast<double>(cpu_allocator_stats().system_allocations - sys_before) /
                         static_cast<double>(state.iterations()));
}

// Registers `fn` once per precision, as <name>/f32, /bf16_autocast, /bf16_autocast_working_copies,
// /fp16_scaled and /fp16_scaled_working_copies, or only the suffixes in `only` (when given); with a fixed
// number of timed steps when `iterations` > 0.
inline void register_precisions(const char* name, void (*fn)(benchmark::State&, Precision),
                                std::vector<std::string> only = {}, int64_t iterations = 0) {
  const std::pair<const char*, Precision> all[] = {{"f32", kF32},
                                                   {"bf16_autocast", kBF16},
                                                   {"bf16_autocast_working_copies", kBF16WorkingCopies},
                                                   {"fp16_scaled", kF16Scaled},
                                                   {"fp16_scaled_working_copies", kF16ScaledWorkingCopies}};
  for (const auto& [suffix, precision] : all) {
    if (!only.empty() && std::find(only.begin(), only.end(), suffix) == only.end()) continue;
    benchmark::internal::Benchmark* b =
        benchmark::RegisterBenchmark((std::string(name) + "/" + suffix).c_str(),
                                     [fn, precision](benchmark::State& s) { fn(s, precision); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    if (iterations > 0) b->Iterations(iterations);
  }
}

}  // namespace mantissa::bench
