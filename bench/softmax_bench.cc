// softmax / log_softmax / cross_entropy throughput: forward and backward over the last dim (the fast
// path) and a middle dim, f32 and bf16, reported in bytes/s of the tensors each pass must move
// (forward: read x, write y; backward: read dy and y, write dx; cross_entropy: read the logits).
//   ./build/bench/softmax_bench --benchmark_min_time=0.5s
#include <benchmark/benchmark.h>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/loss/loss.h"
#include "ops/softmax/softmax.h"

namespace mantissa {
namespace {

Tensor random_input(const Shape& shape, DType dtype) {
  Generator gen(1);
  Tensor x = empty(shape, {.dtype = DType::kF32});
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = 8.0f * gen.uniform_float() - 4.0f;
  return x.to(dtype);
}

// args: rows, cols, dim (-1: last; 0: the first of the two dims), dtype (0 f32, 1 bf16)
DType arg_dtype(const benchmark::State& s) { return s.range(3) == 0 ? kFloat32 : kBFloat16; }

void BM_SoftmaxForward(benchmark::State& state) {
  const DType dt = arg_dtype(state);
  const Tensor x = random_input({state.range(0), state.range(1)}, dt);
  for (auto _ : state) benchmark::DoNotOptimize(softmax(x, state.range(2)));
  state.SetBytesProcessed(state.iterations() * 2 * x.numel() * static_cast<int64_t>(element_size(dt)));
}

void BM_LogSoftmaxForward(benchmark::State& state) {
  const DType dt = arg_dtype(state);
  const Tensor x = random_input({state.range(0), state.range(1)}, dt);
  for (auto _ : state) benchmark::DoNotOptimize(log_softmax(x, state.range(2)));
  state.SetBytesProcessed(state.iterations() * 2 * x.numel() * static_cast<int64_t>(element_size(dt)));
}

void BM_SoftmaxBackward(benchmark::State& state) {
  const DType dt = arg_dtype(state);
  const Tensor x = random_input({state.range(0), state.range(1)}, dt).set_requires_grad(true);
  const Tensor g = random_input({state.range(0), state.range(1)}, dt);
  for (auto _ : state) {
    state.PauseTiming();
    const Tensor y = softmax(x, state.range(2));
    state.ResumeTiming();
    y.backward(g);
  }
  state.SetBytesProcessed(state.iterations() * 3 * x.numel() * static_cast<int64_t>(element_size(dt)));
}

void BM_CrossEntropy(benchmark::State& state) {
  const DType dt = arg_dtype(state);
  const Tensor x = random_input({state.range(0), state.range(1)}, dt);
  Tensor t = empty({state.range(0)}, {.dtype = kInt64});
  for (int64_t i = 0; i < state.range(0); ++i) t.data<int64_t>()[i] = (i * 7919) % state.range(1);
  for (auto _ : state) benchmark::DoNotOptimize(cross_entropy(x, t));
  state.SetBytesProcessed(state.iterations() * x.numel() * static_cast<int64_t>(element_size(dt)));
}

// 4M elements (16 MiB in f32): bigger than L2, a realistic attention/classifier size.
void shapes(benchmark::internal::Benchmark* b) {
  for (int64_t dt : {0, 1}) {
    b->Args({4096, 1024, -1, dt});
    b->Args({1024, 4096, -1, dt});
    b->Args({1024, 4096, 0, dt});  // reduction over the leading dim: the strided (inner > 1) kernel
  }
  b->ArgNames({"rows", "cols", "dim", "bf16"})->UseRealTime();
}

BENCHMARK(BM_SoftmaxForward)->Apply(shapes);
BENCHMARK(BM_LogSoftmaxForward)->Apply(shapes);
BENCHMARK(BM_SoftmaxBackward)->Apply(shapes);
BENCHMARK(BM_CrossEntropy)
    ->Args({4096, 1024, -1, 0})
    ->Args({512, 32000, -1, 0})
    ->Args({512, 32000, -1, 1})
    ->ArgNames({"rows", "cols", "dim", "bf16"})
    ->UseRealTime();

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
