// Causal attention, the fused op against the composed math path, forward and forward + backward, f32 and
// bf16, at the character GPT's shapes (B 32, H 4, T 128, D 32) and GPT-2 small's (B 1, H 12, T 1024,
// D 64). Counters: GFLOP/s of the attention's useful work (the causal half of the score and output
// products: 2 B H T^2 D forward, 2.5x that more backward).
//   ./build/bench/attention_bench --benchmark_min_time=1s
#include <benchmark/benchmark.h>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "ops/attention/attention.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

struct Case {
  int64_t B, H, T, D;
};
constexpr Case kCases[] = {{32, 4, 128, 32}, {1, 12, 1024, 64}};

// args: case, dtype (0 f32, 1 bf16), fused (1) or math (0), backward (1) or not (0)
void BM_Attention(benchmark::State& state) {
  const Case c = kCases[state.range(0)];
  const DType dt = state.range(1) == 0 ? DType::kF32 : DType::kBF16;
  const bool fused = state.range(2) == 1, backward = state.range(3) == 1;
  Generator gen(1);
  const Shape shape{c.B, c.H, c.T, c.D};
  Tensor q = randn(shape, {}, &gen).to(dt), k = randn(shape, {}, &gen).to(dt), v = randn(shape, {}, &gen).to(dt);
  const Tensor g = randn(shape, {}, &gen).to(dt);
  if (backward) {
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  }
  const AttentionOptions o{.mask = AttentionMask::kCausal};
  for (auto _ : state) {
    const Tensor y = fused ? scaled_dot_product_attention(q, k, v, o) : scaled_dot_product_attention_math(q, k, v, o);
    if (backward) {
      y.backward(g);
      for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    }
    benchmark::DoNotOptimize(y);
  }
  const double forward_flops = 2.0 * static_cast<double>(c.B * c.H * c.T * c.T * c.D);  // causal: half of 4 B H T^2 D
  const double flops = backward ? 3.5 * forward_flops : forward_flops;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(c.T == 128 ? "char-gpt" : "gpt2-small") + (dt == DType::kF32 ? " f32" : " bf16") +
                 (fused ? " fused" : " math") + (backward ? " fwd+bwd" : " fwd"));
}

BENCHMARK(BM_Attention)
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1}, {0, 1}})
    ->ArgNames({"case", "bf16", "fused", "bwd"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
