// What the profiler costs (framework/profiler/profiler.h). BM_OpChain100: 100 small elementwise ops (add,
// mul, relu on 64 floats: each op is mostly its call overhead, so any per-op cost shows), and BM_MlpStep:
// the MLP step of mlp_step_bench (784-1024-1024-10, batch 256, Adam, f32). Each with the profiler off
// ("off") and recording ("on"); the on cases report events/iteration and ns_per_event, the extra time per
// recorded event against the off case of the same run. Built without the profiler (an older tree), only
// the off cases exist: bench/compare_builds.sh runs them against today's build for the cost of having it
// compiled in.
#include <benchmark/benchmark.h>

#include <memory>

#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#if __has_include("framework/profiler/profile.h")
#include "framework/profiler/profile.h"
#define MANTISSA_BENCH_PROFILER 1
#endif

namespace mantissa {
namespace {

Tensor op_chain(const Tensor& x) {
  Tensor y = x;
  for (int i = 0; i < 34; ++i) y = relu(y * 0.5 + 1.0);  // 3 ops a round, 102 in all
  return y;
}

struct MlpStep {
  Sequential model{std::make_shared<Linear>(784, 1024), std::make_shared<ReLU>(), std::make_shared<Linear>(1024, 1024),
                   std::make_shared<ReLU>(), std::make_shared<Linear>(1024, 10)};
  Adam adam{model.named_parameters(), {.lr = 1e-3}};
  Tensor x = randn({256, 784});
  Tensor y = zeros({256}, {.dtype = DType::kI64});
  void run() {
    adam.zero_grad();
    cross_entropy(model.forward(x), y).backward();
    adam.step();
  }
};

void BM_OpChain100_off(benchmark::State& state) {
  const Tensor x = randn({64});
  for (auto _ : state) benchmark::DoNotOptimize(op_chain(x));
}
BENCHMARK(BM_OpChain100_off)->UseRealTime();

void BM_MlpStep_off(benchmark::State& state) {
  manual_seed(0);
  MlpStep step;
  step.run();
  for (auto _ : state) step.run();
}
BENCHMARK(BM_MlpStep_off)->UseRealTime()->Unit(benchmark::kMillisecond);

#ifdef MANTISSA_BENCH_PROFILER
// Runs `body` under a profiler session, a fresh one every 200 iterations (so that the buffers stay the
// size of a real session's), and counts the events.
template <typename F>
void profiled(benchmark::State& state, F&& body, profiler::ProfilerOptions options = {}) {
  double events = 0;
  int64_t n = 0;
  auto prof = std::make_unique<profiler::Profiler>(options);
  prof->start();
  for (auto _ : state) {
    body();
    if (++n % 200 == 0) {
      state.PauseTiming();
      events += static_cast<double>(prof->stop().events().size());
      prof->start();
      state.ResumeTiming();
    }
  }
  events += static_cast<double>(prof->stop().events().size());
  state.counters["events_per_iter"] = events / static_cast<double>(n);
}

void BM_OpChain100_on(benchmark::State& state) {
  const Tensor x = randn({64});
  profiled(state, [&] { benchmark::DoNotOptimize(op_chain(x)); });
}
BENCHMARK(BM_OpChain100_on)->UseRealTime();

void BM_OpChain100_on_without_shapes(benchmark::State& state) {
  const Tensor x = randn({64});
  profiled(state, [&] { benchmark::DoNotOptimize(op_chain(x)); }, {.record_shapes = false, .profile_memory = false});
}
BENCHMARK(BM_OpChain100_on_without_shapes)->UseRealTime();

void BM_MlpStep_on(benchmark::State& state) {
  manual_seed(0);
  MlpStep step;
  step.run();
  profiled(state, [&] { step.run(); });
}
BENCHMARK(BM_MlpStep_on)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
