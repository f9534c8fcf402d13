// GEMM throughput on a GPU through mantissa's cuBLASLt launcher (ops/matmul/gemm_launch.h): bf16, f16, f32 (exact)
// and f32 with TF32, and FP8 (E4M3 x E4M3 with per-tensor scales, bf16 out: the scaled_mm op of ops/fp8/fp8.h,
// cuBLASLt's FP8 kernels on sm_89+; not the LM head, whose 50257 columns FP8 cannot take), on 4096^3 and on the GEMMs
// of a GPT-2-small step (8 x 1024 tokens, width 768: the fused qkv projection, the attention output, the MLP up and
// down projections and the tied LM head, each as linear computes it, x [tokens, in] @ W[out, in]^T). The best bf16
// figure is the "measured bf16 matmul peak" that model FLOPs utilisation is reported against. Time per GEMM from CUDA
// events around 20 calls; counter TFLOP/s = 2 m n k / time. Without a device (or without CUDA) it says so and exits 0.
//   ./build/bench/cuda_gemm_bench --benchmark_filter=bf16
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "framework/cuda/device.h"

#ifdef MANTISSA_WITH_CUDA
#include <cuda_runtime_api.h>
#include <random>

#include "framework/cuda/stream.h"
#include "framework/half.h"
#include "framework/random.h"
#include "ops/fp8/fp8.h"
#include "ops/matmul/gemm_launch.h"
#include "ops/matmul/tf32.h"

namespace mantissa {
namespace {

struct GemmShape {
  std::string name;
  int64_t m, n, k;
  cpu::Trans trans_b;  // kYes: x @ W^T as in linear
};

std::vector<GemmShape> shapes() {
  const int64_t tokens = 8 * 1024, width = 768;
  return {
      {"square4096", 4096, 4096, 4096, cpu::Trans::kNo},
      {"gpt2_qkv", tokens, 3 * width, width, cpu::Trans::kYes},
      {"gpt2_attn_proj", tokens, width, width, cpu::Trans::kYes},
      {"gpt2_mlp_up", tokens, 4 * width, width, cpu::Trans::kYes},
      {"gpt2_mlp_down", tokens, width, 4 * width, cpu::Trans::kYes},
      {"gpt2_lm_head", tokens, 50257, width, cpu::Trans::kYes},
  };
}

#define BENCH_CUDA_CHECK(expr)                                                             \
  do {                                                                                     \
    const cudaError_t err_ = (expr);                                                       \
    if (err_ != cudaSuccess) {                                                             \
      state.SkipWithError((std::string(#expr) + ": " + cudaGetErrorString(err_)).c_str()); \
      return;                                                                              \
    }                                                                                      \
  } while (0)

template <typename T>
void BM_cuda_gemm(benchmark::State& state, GemmShape s, Tf32 tf32) {
  const size_t na = static_cast<size_t>(s.m * s.k), nb = static_cast<size_t>(s.k * s.n),
               nc = static_cast<size_t>(s.m * s.n);
  std::vector<T> host(std::max(na, nb));
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (T& v : host) v = T(dist(gen));
  void *pa = nullptr, *pb = nullptr, *pc = nullptr;
  BENCH_CUDA_CHECK(cudaMalloc(&pa, na * sizeof(T)));
  BENCH_CUDA_CHECK(cudaMalloc(&pb, nb * sizeof(T)));
  BENCH_CUDA_CHECK(cudaMalloc(&pc, nc * sizeof(T)));
  T *a = static_cast<T*>(pa), *b = static_cast<T*>(pb), *c = static_cast<T*>(pc);
  BENCH_CUDA_CHECK(cudaMemcpy(a, host.data(), na * sizeof(T), cudaMemcpyHostToDevice));
  BENCH_CUDA_CHECK(cudaMemcpy(b, host.data(), nb * sizeof(T), cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));

  const Tf32 saved = cuda_matmul_tf32();
  set_cuda_matmul_tf32(tf32);
  const bool tb = s.trans_b == cpu::Trans::kYes;
  const gpu::GemmArgs<T> args{.gemm = {.gemm = {.trans_b = s.trans_b,
                                                .m = s.m,
                                                .n = s.n,
                                                .k = s.k,
                                                .a = a,
                                                .lda = s.k,
                                                .b = b,
                                                .ldb = tb ? s.k : s.n,
                                                .c = c,
                                                .ldc = s.n}}};
  for (int i = 0; i < 3; ++i) gpu::gemm(args, 0, stream);  // plan, workspace, clocks
  constexpr int kCalls = 20;
  for (auto _ : state) {
    BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kCalls; ++i) gpu::gemm(args, 0, stream);
    BENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3 / kCalls);
  }
  set_cuda_matmul_tf32(saved);
  state.counters["TFLOP/s"] =
      benchmark::Counter(2e-12 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + (tb ? " (B^T)" : ""));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  (void)cudaStreamDestroy(stream);
  (void)cudaFree(a);
  (void)cudaFree(b);
  (void)cudaFree(c);
}

// The scaled FP8 matmul through the op, as fp8_linear calls it: x [m, k] @ W[n, k]^T, both K-contiguous (no
// layout copy), scale inverses on the device, bf16 out.
void BM_cuda_scaled_mm(benchmark::State& state, GemmShape s) {
  const Device dev = cuda(0);
  const Tensor one = scalar_tensor(1.0, {.dtype = DType::kF32}).to(dev);
  const Tensor x = quantize_fp8(randn({s.m, s.k}).to(dev), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  const Tensor w = quantize_fp8(randn({s.n, s.k}).to(dev), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  cudaStream_t stream = gpu::current_stream(dev);
  cudaEvent_t start = nullptr, stop = nullptr;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) benchmark::DoNotOptimize(scaled_mm(x, w.t(), one, one, DType::kBF16));
  constexpr int kCalls = 20;
  for (auto _ : state) {
    BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kCalls; ++i) benchmark::DoNotOptimize(scaled_mm(x, w.t(), one, one, DType::kBF16));
    BENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
    BENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3 / kCalls);
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(2e-12 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k),
                         benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) + " (B^T)");
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
}

void register_all() {
  for (const GemmShape& s : shapes()) {
    auto reg = [&](const char* dtype, auto fn) {
      benchmark::RegisterBenchmark(("cuda_gemm/" + std::string(dtype) + "/" + s.name).c_str(), fn)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    };
    reg("bf16", [s](benchmark::State& st) { BM_cuda_gemm<BFloat16>(st, s, Tf32::kOff); });
    reg("f16", [s](benchmark::State& st) { BM_cuda_gemm<Half>(st, s, Tf32::kOff); });
    reg("tf32", [s](benchmark::State& st) { BM_cuda_gemm<float>(st, s, Tf32::kOn); });
    reg("f32", [s](benchmark::State& st) { BM_cuda_gemm<float>(st, s, Tf32::kOff); });
    if (s.n % 16 == 0 && s.m % 16 == 0 && s.k % 16 == 0) {
      reg("fp8", [s](benchmark::State& st) { BM_cuda_scaled_mm(st, s); });
    }
  }
}

}  // namespace
}  // namespace mantissa
#endif  // MANTISSA_WITH_CUDA

int main(int argc, char** argv) {
  if (mantissa::cuda_device_count() == 0) {
    std::printf("cuda_gemm_bench: skipped, no CUDA device: %s\n", mantissa::cuda_unavailable_reason().c_str());
    return 0;
  }
#ifdef MANTISSA_WITH_CUDA
  mantissa::register_all();
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
