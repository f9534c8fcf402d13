// The CNN block's tail, relu(max_pool2d(batch_norm(x), 2x2)), as the fused op (batch_norm_relu_pool2d) and
// as the three ops, forward and forward + backward, training mode, at the CNN's two shapes (batch 128):
// [128, 32, 26, 26] and [128, 64, 11, 11], f32 and bf16.
//   ./build/bench/batch_norm_bench --benchmark_min_time=1s
#include <benchmark/benchmark.h>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm.h"
#include "ops/pool/pool.h"

namespace mantissa {
namespace {

constexpr int64_t kShapes[2][4] = {{128, 32, 26, 26}, {128, 64, 11, 11}};

// args: shape, dtype (0 f32, 1 bf16), fused (1) or composed (0), backward (1) or not (0)
void BM_BatchNormReluPool(benchmark::State& state) {
  const int64_t* s = kShapes[state.range(0)];
  const DType dt = state.range(1) == 0 ? DType::kF32 : DType::kBF16;
  const bool fused = state.range(2) == 1, backward = state.range(3) == 1;
  Generator gen(1);
  Tensor x = randn({s[0], s[1], s[2], s[3]}, {}, &gen).to(dt);
  Tensor w = ones({s[1]}).set_requires_grad(backward), b = zeros({s[1]}).set_requires_grad(backward);
  Tensor rm = zeros({s[1]}), rv = ones({s[1]});
  if (backward) x.set_requires_grad(true);
  const Tensor g = randn({s[0], s[1], s[2] / 2, s[3] / 2}, {}, &gen).to(dt);
  for (auto _ : state) {
    const Tensor y =
        fused ? batch_norm_relu_pool2d(x, rm, rv, w, b, BatchNormMode::kTrain)
              : relu(max_pool2d(batch_norm(x, rm, rv, w, b, BatchNormMode::kTrain), {.kernel_size = {2, 2}}));
    if (backward) {
      y.backward(g);
      for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
    }
    benchmark::DoNotOptimize(y);
  }
  state.SetLabel(std::string(s[2] == 26 ? "conv1 out" : "conv2 out") + (dt == DType::kF32 ? " f32" : " bf16") +
                 (fused ? " fused" : " composed") + (backward ? " fwd+bwd" : " fwd"));
}

BENCHMARK(BM_BatchNormReluPool)
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1}, {0, 1}})
    ->ArgNames({"shape", "bf16", "fused", "bwd"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
