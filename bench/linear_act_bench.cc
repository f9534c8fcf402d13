// A linear layer with its activation, act(x @ w^T + b), as the fused op (linear_act: the activation in the
// GEMM's epilogue) and as linear then the activation's op, forward and forward + backward, at the MLP
// block shapes of the two GPTs the benchmarks train: the character GPT's c_fc (batch 32 x block 128 rows,
// 256 -> 1024) and GPT-2 small's (1024 rows, 768 -> 3072); GELU (erf form, the GPTs') and ReLU; f32 and
// bf16.
//   ./build/bench/linear_act_bench --benchmark_min_time=1 --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <string>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"

namespace mantissa {
namespace {

constexpr int64_t kShapes[2][3] = {{4096, 256, 1024}, {1024, 768, 3072}};  // rows, in, out

// args: shape, dtype (0 f32, 1 bf16), activation (0 GELU, 1 ReLU), fused (1) or composed (0),
// backward (1) or not (0)
void BM_LinearAct(benchmark::State& state) {
  const int64_t* s = kShapes[state.range(0)];
  const DType dt = state.range(1) == 0 ? DType::kF32 : DType::kBF16;
  const Activation act = state.range(2) == 0 ? Activation::kGelu : Activation::kRelu;
  const bool fused = state.range(3) == 1, backward = state.range(4) == 1;
  Generator gen(1);
  Tensor x = randn({s[0], s[1]}, {}, &gen).to(dt).set_requires_grad(backward);
  Tensor w = (randn({s[2], s[1]}, {}, &gen) * 0.05).to(dt).set_requires_grad(backward);
  Tensor b = randn({s[2]}, {}, &gen).to(dt).set_requires_grad(backward);
  const Tensor g = randn({s[0], s[2]}, {}, &gen).to(dt);
  for (auto _ : state) {
    const Tensor y = fused ? linear_act(x, w, b, act) : activate(linear(x, w, b), act);
    if (backward) {
      y.backward(g);
      for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    }
    benchmark::DoNotOptimize(y);
  }
  const double flops = 2.0 * static_cast<double>(s[0] * s[1] * s[2]) * (backward ? 3.0 : 1.0);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(s[1] == 256 ? "char GPT c_fc" : "GPT-2s c_fc") + (dt == DType::kF32 ? " f32" : " bf16") +
                 (act == Activation::kGelu ? " gelu" : " relu") + (fused ? " fused" : " composed") +
                 (backward ? " fwd+bwd" : " fwd"));
}

BENCHMARK(BM_LinearAct)
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1}, {0, 1}, {0, 1}})
    ->ArgNames({"shape", "bf16", "relu", "fused", "bwd"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
