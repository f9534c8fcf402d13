// Bandwidth of the CUDA kernels of ops/cuda at GPT-2-small shapes (B*T = 8192 tokens, C = 768, 4C = 3072,
// vocabulary 50257, 12 heads x T = 1024): each iteration runs the op 10 times and waits for the device;
// GBps counts the bytes an op must read and write once (inputs + outputs), against the H100's ~3.3 TB/s
// HBM peak. Skips with a message without a GPU.
#include <benchmark/benchmark.h>

#include <functional>

#include "framework/cuda/device.h"
#include "framework/random.h"
#include "ops/dropout/dropout.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/norm/norm.h"
#include "ops/reduce/reduce.h"
#include "ops/softmax/softmax.h"

namespace mantissa {
namespace {

// A one-element copy to the host on the current stream: it returns once the queued work is done (the
// bench programs do not see the CUDA headers, so no cudaStreamSynchronize here).
void wait_device() {
  static const Tensor probe = zeros({1}, {.device = cuda(0)});
  benchmark::DoNotOptimize(probe.to(kCPU));
}

Tensor device_randn(const Shape& shape, DType dtype) { return randn(shape).to(dtype).to(cuda(0)); }

// Runs op 10 times per iteration; `bytes` is what one call reads and writes.
void run(benchmark::State& state, double bytes, const std::function<void()>& op) {
  if (cuda_device_count() == 0) {
    state.SkipWithError(("no CUDA device: " + cuda_unavailable_reason()).c_str());
    return;
  }
  op();  // warm-up: allocator blocks, SM count queries
  wait_device();
  for (auto _ : state) {
    for (int i = 0; i < 10; ++i) op();
    wait_device();
  }
  state.counters["GBps"] = benchmark::Counter(bytes * 10 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

double bytes_of(const Shape& shape, DType dtype) {
  return static_cast<double>(shape_numel(shape) * static_cast<int64_t>(element_size(dtype)));
}

void BM_Add(benchmark::State& state, DType dt) {
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{8192, 3072};
  const Tensor a = device_randn(s, dt), b = device_randn(s, dt);
  run(state, 3 * bytes_of(s, dt), [&] { benchmark::DoNotOptimize(add(a, b)); });
}

void BM_AddBias(benchmark::State& state, DType dt) {  // broadcast (strided) path
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{8192, 3072};
  const Tensor a = device_randn(s, dt), b = device_randn({3072}, dt);
  run(state, 2 * bytes_of(s, dt), [&] { benchmark::DoNotOptimize(add(a, b)); });
}

void BM_Gelu(benchmark::State& state, DType dt) {
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{8192, 3072};
  const Tensor a = device_randn(s, dt);
  run(state, 2 * bytes_of(s, dt), [&] { benchmark::DoNotOptimize(gelu(a)); });
}

void BM_BiasGrad(benchmark::State& state, DType dt) {  // sum over rows (column mode, sliced)
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{8192, 768};
  const Tensor g = device_randn(s, dt);
  run(state, bytes_of(s, dt), [&] { benchmark::DoNotOptimize(sum_to(g, {768})); });
}

void BM_Softmax(benchmark::State& state, DType dt) {  // attention scores [B*H, T, T], rows of 1024
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{96, 1024, 1024};
  const Tensor x = device_randn(s, dt);
  run(state, 2 * bytes_of(s, dt), [&] { benchmark::DoNotOptimize(softmax(x, -1)); });
}

void BM_LayerNorm(benchmark::State& state, DType dt) {
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{8192, 768};
  const Tensor x = device_randn(s, dt), w = device_randn({768}, DType::kF32), b = device_randn({768}, DType::kF32);
  run(state, 2 * bytes_of(s, dt), [&] { benchmark::DoNotOptimize(layer_norm(x, {768}, w, b)); });
}

void BM_CrossEntropy(benchmark::State& state, DType dt) {  // logits [B*T, V]
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{8192, 50257};
  const Tensor x = device_randn(s, dt);
  const Tensor t = arange(0.0, 8192.0).to(cuda(0));
  run(state, bytes_of(s, dt), [&] { benchmark::DoNotOptimize(cross_entropy(x, t)); });
}

void BM_Dropout(benchmark::State& state, DType dt) {
  if (cuda_device_count() == 0) return run(state, 0, [] {});
  const Shape s{8192, 3072};
  const Tensor x = device_randn(s, dt);
  run(state, 2 * bytes_of(s, dt) + static_cast<double>(shape_numel(s)),
      [&] { benchmark::DoNotOptimize(dropout(x, 0.1)); });
}

#define MT_BENCH_DTYPES(FN)                                                              \
  BENCHMARK_CAPTURE(FN, f32, DType::kF32)->UseRealTime()->Unit(benchmark::kMicrosecond); \
  BENCHMARK_CAPTURE(FN, bf16, DType::kBF16)->UseRealTime()->Unit(benchmark::kMicrosecond)
MT_BENCH_DTYPES(BM_Add);
MT_BENCH_DTYPES(BM_AddBias);
MT_BENCH_DTYPES(BM_Gelu);
MT_BENCH_DTYPES(BM_BiasGrad);
MT_BENCH_DTYPES(BM_Softmax);
MT_BENCH_DTYPES(BM_LayerNorm);
MT_BENCH_DTYPES(BM_CrossEntropy);
MT_BENCH_DTYPES(BM_Dropout);
#undef MT_BENCH_DTYPES

}  // namespace
}  // namespace mantissa

BENCHMARK_MAIN();
