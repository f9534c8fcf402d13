// layer_norm speed on a transformer-sized activation [4096, 1024] (rows = batch * time, C = 1024),
// forward and forward + backward, in f32 and bf16. Reports bytes moved per second (x read, y written;
// the backward reads x and dy and writes dx).
#include <benchmark/benchmark.h>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/norm/norm.h"

namespace mantissa {
namespace {

constexpr int64_t kRows = 4096, kC = 1024;

Tensor filled(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& e : v) e = static_cast<float>(gen.normal());
  return from_vector<float>(v, shape).to(dtype);
}

void BM_LayerNormForward(benchmark::State& state, DType dtype) {
  const Tensor x = filled({kRows, kC}, dtype, 1), w = filled({kC}, dtype, 2), b = filled({kC}, dtype, 3);
  NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(layer_norm(x, {kC}, w, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * 2 * x.nbytes());
}

void BM_LayerNormForwardBackward(benchmark::State& state, DType dtype) {
  Tensor x = filled({kRows, kC}, dtype, 1).set_requires_grad(true);
  Tensor w = filled({kC}, dtype, 2).set_requires_grad(true), b = filled({kC}, dtype, 3).set_requires_grad(true);
  const Tensor g = filled({kRows, kC}, dtype, 4);
  for (auto _ : state) {
    layer_norm(x, {kC}, w, b).backward(g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * 5 * x.nbytes());
}

BENCHMARK_CAPTURE(BM_LayerNormForward, f32, kFloat32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_LayerNormForward, bf16, kBFloat16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_LayerNormForwardBackward, f32, kFloat32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_LayerNormForwardBackward, bf16, kBFloat16)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
