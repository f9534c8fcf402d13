// Optimizer step throughput on 10M f32 parameters (one tensor): SGD with momentum, AdamW and Lion, as a plain
// step, as the GradScaler's unfused path (unscale_grads_: check + g *= inv_scale in place, then step) and
// as its fused path (check_grads_finite_ reads the grads, then step(GradScaling) unscales inside the update).
// bytes_per_second counts what each variant must move (each f32 array read or written once, no
// write-allocate traffic, the STREAM convention):
//   SGD momentum step: read p, g, buf; write p, buf         = 20 B/param
//   AdamW step:        read p, g, m, v; write p, m, v       = 28 B/param
//   Lion step:         read p, g, m; write p, m             = 20 B/param
//   unscale_grads_:    read g, write g                      = +8 B/param
//   check_grads_finite_: read g                             = +4 B/param
//   OMP_NUM_THREADS=2 ./build/bench/optim_bench
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "amp/unscale_grads.h"
#include "bench/ladder_rungs.h"
#include "framework/parallel.h"
#include "framework/random.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

constexpr int64_t kParams = 10'000'000;

// kWorkingCopy: a plain step that also writes a bf16 working copy in the same pass (+2 B/param), against
// kSeparateCopy: a plain step followed by a separate pass rounding the master into the copy (+6 B/param).
enum class Variant { kPlain, kUnfusedScaler, kFusedScaler, kWorkingCopy, kSeparateCopy };

// One parameter of kParams elements with a grad, and an optimizer over it whose state exists already.
// Under a precision ladder (optim/precision_ladder.h) the parameter and its grad are bf16 without masters.
template <typename Opt, typename Options>
void run(benchmark::State& state, Options options, Variant variant, double step_bytes, PrecisionLadder ladder = {}) {
  Generator gen(1);
  const DType dtype = ladder.master_weights == MasterWeights::kNone ? DType::kBF16 : DType::kF32;
  Tensor w = randn({kParams}, {}, &gen).to(dtype).set_requires_grad(true);
  Tensor g = randn({kParams}, {}, &gen).to(dtype);
  w.set_grad(g);
  Opt opt({{"w", w}}, options, ladder);
  if (variant == Variant::kWorkingCopy) opt.enable_working_copies(DType::kBF16);
  const Tensor separate_copy = empty({kParams}, {.dtype = DType::kBF16});
  opt.step();                                   // allocates the state
  const Tensor inv_scale = scalar_tensor(1.0);  // 1: the grads and weights stay in range over many steps
  const Tensor found_inf = scalar_tensor(0.0);
  for (auto _ : state) {
    switch (variant) {
      case Variant::kPlain: opt.step(); break;
      case Variant::kUnfusedScaler:
        unscale_grads_(opt, inv_scale, found_inf);
        opt.step();
        break;
      case Variant::kFusedScaler:
        check_grads_finite_(opt, found_inf);
        opt.step({.inv_scale = inv_scale, .found_inf = found_inf});
        break;
      case Variant::kWorkingCopy: opt.step(); break;
      case Variant::kSeparateCopy:
        opt.step();
        copy_(separate_copy, w.detach());
        break;
    }
    benchmark::ClobberMemory();
  }
  const int64_t extra = variant == Variant::kUnfusedScaler  ? 8
                        : variant == Variant::kFusedScaler  ? 4
                        : variant == Variant::kWorkingCopy  ? 2
                        : variant == Variant::kSeparateCopy ? 6
                                                            : 0;
  state.SetBytesProcessed(static_cast<int64_t>(double(state.iterations() * kParams) * (step_bytes + extra)));
  state.counters["params_per_s"] = benchmark::Counter(double(kParams), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = num_threads();
}

const SGDOptions kSgd{.lr = 1e-3, .momentum = 0.9};
const AdamWOptions kAdamW{.lr = 1e-3, .weight_decay = 0.01};
const LionOptions kLion{.lr = 1e-4, .weight_decay = 0.1};

void BM_SgdMomentum(benchmark::State& s) { run<SGD>(s, kSgd, Variant::kPlain, 20); }
void BM_SgdMomentum_UnscaleThenStep(benchmark::State& s) { run<SGD>(s, kSgd, Variant::kUnfusedScaler, 20); }
void BM_SgdMomentum_Fused(benchmark::State& s) { run<SGD>(s, kSgd, Variant::kFusedScaler, 20); }
void BM_AdamW(benchmark::State& s) { run<AdamW>(s, kAdamW, Variant::kPlain, 28); }
void BM_AdamW_WorkingCopyFused(benchmark::State& s) { run<AdamW>(s, kAdamW, Variant::kWorkingCopy, 28); }
void BM_AdamW_WorkingCopySeparatePass(benchmark::State& s) { run<AdamW>(s, kAdamW, Variant::kSeparateCopy, 28); }
void BM_AdamW_UnscaleThenStep(benchmark::State& s) { run<AdamW>(s, kAdamW, Variant::kUnfusedScaler, 28); }
void BM_AdamW_Fused(benchmark::State& s) { run<AdamW>(s, kAdamW, Variant::kFusedScaler, 28); }
void BM_Lion(benchmark::State& s) { run<Lion>(s, kLion, Variant::kPlain, 20); }
void BM_Lion_Fused(benchmark::State& s) { run<Lion>(s, kLion, Variant::kFusedScaler, 20); }

BENCHMARK(BM_SgdMomentum)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SgdMomentum_UnscaleThenStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SgdMomentum_Fused)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW_UnscaleThenStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW_Fused)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW_WorkingCopyFused)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamW_WorkingCopySeparatePass)->Unit(benchmark::kMillisecond)->UseRealTime();
// The precision ladder's AdamW (issue 36) under each rung (bench/ladder_rungs.h), bytes as above per storage:
// BM_AdamW_StateBf16, BM_AdamW_Bf16Stochastic8bit, ...
const bool kLadderBenchmarks = [] {
  for (const LadderRung& rung : ladder_rungs())
    benchmark::RegisterBenchmark((std::string("BM_AdamW_") + rung.name).c_str(),
                                 [ladder = rung.ladder](benchmark::State& s) {
                                   run<AdamW>(s, kAdamW, Variant::kPlain, adam_step_bytes(ladder, false), ladder);
                                 })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  return true;
}();
BENCHMARK(BM_Lion)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Lion_Fused)->Unit(benchmark::kMillisecond)->UseRealTime();

// A STREAM-like triad (a = b + s c, 12 B/element) over the same length: what memory delivers here.
void BM_TriadReference(benchmark::State& state) {
  std::vector<float> a(kParams, 1.0f), b(kParams, 2.0f), c(kParams, 3.0f);
  float* pa = a.data();
  const float* pb = b.data();
  const float* pc = c.data();
  for (auto _ : state) {
    parallel_for(kParams, 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) pa[i] = pb[i] + 3.0f * pc[i];
    });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kParams * 12);
}
BENCHMARK(BM_TriadReference)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
