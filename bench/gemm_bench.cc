// Square GEMM throughput: mantissa's f32, f16 and bf16 kernels (ops/matmul/gemm_cpu.h) and the mm op, beside
// OpenBLAS's own cblas_sgemm in the same run. Counter GFLOP (shown per second) = 2 n^3 per iteration.
//
// OpenBLAS picks its kernels from OPENBLAS_CORETYPE when it loads, and this environment exports Haswell
// (half its AVX-512 speed). To compare against OpenBLAS at its best the program re-executes itself once
// with OPENBLAS_CORETYPE=SkylakeX; set MANTISSA_BENCH_OPENBLAS_CORETYPE to another core name, or to
// "keep" to leave the environment alone. The core OpenBLAS used is printed in the context.
//   ./build/bench/gemm_bench --benchmark_filter=2048
#include <benchmark/benchmark.h>

#include <cblas.h>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "framework/half.h"
#include "ops/matmul/gemm_cpu.h"
#include "ops/matmul/matmul.h"

namespace mantissa {
namespace {

template <typename T>
std::vector<T> filled(int64_t n, float scale) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = T(scale * static_cast<float>((i * 7919) % 1000 - 500) / 500.0f);
  return v;
}

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["GFLOP"] =
      benchmark::Counter(2e-9 * static_cast<double>(n * n * n), benchmark::Counter::kIsIterationInvariantRate);
}

template <typename T>
void BM_mantissa_gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<T> a = filled<T>(n * n, 1.0f), b = filled<T>(n * n, 0.5f);
  std::vector<T> c(static_cast<size_t>(n * n));
  const cpu::GemmArgs<T> args{
      .m = n, .n = n, .k = n, .a = a.data(), .lda = n, .b = b.data(), .ldb = n, .c = c.data(), .ldc = n};
  for (auto _ : state) {
    cpu::gemm(args);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, n);
}

// The whole op: argument checks, output allocation (caching allocator) and the GEMM.
void BM_mantissa_mm_op_f32(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Tensor a = from_vector<float>(filled<float>(n * n, 1.0f), {n, n});
  const Tensor b = from_vector<float>(filled<float>(n * n, 0.5f), {n, n});
  for (auto _ : state) benchmark::DoNotOptimize(mm(a, b));
  set_flops(state, n);
}

void BM_openblas_sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const std::vector<float> a = filled<float>(int64_t{n} * n, 1.0f), b = filled<float>(int64_t{n} * n, 0.5f);
  std::vector<float> c(static_cast<size_t>(n) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, n);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {256, 512, 1024, 2048}) b->Arg(n);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// mantissa first, OpenBLAS last: its worker threads spin for a while after each call, and would steal
// the cores from whatever runs next.
BENCHMARK(BM_mantissa_gemm<float>)->Name("gemm_f32/mantissa")->Apply(sizes);
BENCHMARK(BM_mantissa_gemm<Half>)->Name("gemm_f16/mantissa")->Apply(sizes);
BENCHMARK(BM_mantissa_gemm<BFloat16>)->Name("gemm_bf16/mantissa")->Apply(sizes);
BENCHMARK(BM_mantissa_mm_op_f32)->Name("mm_op_f32/mantissa")->Apply(sizes);
BENCHMARK(BM_openblas_sgemm)->Name("gemm_f32/openblas")->Apply(sizes);

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  const char* want = std::getenv("MANTISSA_BENCH_OPENBLAS_CORETYPE");
  const std::string core = want ? want : "SkylakeX";
  const char* have = std::getenv("OPENBLAS_CORETYPE");
  if (core != "keep" && (have == nullptr || core != have) && std::getenv("MANTISSA_BENCH_REEXECUTED") == nullptr) {
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    setenv("MANTISSA_BENCH_REEXECUTED", "1", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run with the environment as it is
  }
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
