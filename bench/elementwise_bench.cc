// Elementwise throughput against memory bandwidth. Before the benchmarks run, a STREAM-like copy
// (b = a) and triad (a = b + s c) over 64 MiB f32 arrays measure what this machine's memory delivers
// with the library's thread count; every op then reports bytes/s and `of_bw`, its fraction of the
// matching reference (unary ops: read 1 + write 1 like copy; binary ops: read 2 + write 1 like triad).
// Bytes count what the op must move (no write-allocate traffic), the same convention as STREAM's.
//   ./build/bench/elementwise_bench --benchmark_min_time=0.5s
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <omp.h>
#include <type_traits>
#include <vector>

#include "framework/parallel.h"
#include "framework/tensor.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/typed_entries_cpu.h"
#include "ops/softmax/softmax_cpu.h"

namespace mantissa {
namespace {

constexpr int64_t kN = int64_t{1} << 24;  // 16M elements: 64 MiB in f32, far beyond the caches
double g_copy_bps = 0, g_triad_bps = 0;   // bytes per second of the references

// Best of `reps` timed runs of f (after one warm-up), in seconds.
template <typename F>
double best_seconds(int reps, F&& f) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void measure_stream() {
  std::vector<float> a(kN, 1.0f), b(kN, 2.0f), c(kN, 3.0f);  // first touch by one thread; fine on one socket
  float* pa = a.data();
  float* pb = b.data();
  float* pc = c.data();
  const int threads = num_threads();
  const double copy = best_seconds(10, [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < kN; ++i) pb[i] = pa[i];
  });
  const double triad = best_seconds(10, [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < kN; ++i) pa[i] = pb[i] + 3.0f * pc[i];
  });
  g_copy_bps = 2.0 * 4 * kN / copy;
  g_triad_bps = 3.0 * 4 * kN / triad;
  std::printf("memory bandwidth reference, %d threads, 64 MiB arrays: copy %.2f GB/s, triad %.2f GB/s\n", threads,
              g_copy_bps / 1e9, g_triad_bps / 1e9);
}

// Reports bytes/s and the fraction of the reference bandwidth.
void report(benchmark::State& state, int64_t bytes_per_iter, double reference_bps) {
  const double total = static_cast<double>(bytes_per_iter) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(total));
  state.counters["of_bw"] = benchmark::Counter(total / reference_bps, benchmark::Counter::kIsRate);
}

template <DType D>
void BM_Unary(benchmark::State& state, Tensor (*op)(const Tensor&)) {
  const Tensor x = full({kN}, 0.5, {.dtype = D});
  for (auto _ : state) benchmark::DoNotOptimize(op(x));
  report(state, 2 * static_cast<int64_t>(element_size(D)) * kN, g_copy_bps);
}

template <DType D>
void BM_Binary(benchmark::State& state, Tensor (*op)(const Tensor&, const Tensor&)) {
  const Tensor a = full({kN}, 0.5, {.dtype = D}), b = full({kN}, 1.5, {.dtype = D});
  for (auto _ : state) benchmark::DoNotOptimize(op(a, b));
  report(state, 3 * static_cast<int64_t>(element_size(D)) * kN, g_triad_bps);
}

Tensor gelu_erf(const Tensor& x) { return gelu(x); }
// exp through the same shared loop (ops/elementwise/typed_entries_cpu.h) with the vectorizable cpu::fast_expf instead
// of std::exp: shows what the loop delivers once the functor itself vectorizes.
Tensor exp_fast(const Tensor& x) {
  return map_unary(x, "exp", [](auto v) {
    if constexpr (std::is_same_v<decltype(v), float>) {
      return cpu::fast_expf(v);
    } else {
      return std::exp(v);
    }
  });
}
Tensor add_tt(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor mul_tt(const Tensor& a, const Tensor& b) { return mul(a, b); }

void register_all() {
  const std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)> binary[] = {{"add", add_tt}, {"mul", mul_tt}};
  const std::pair<const char*, Tensor (*)(const Tensor&)> unary[] = {
      {"relu", relu}, {"gelu", gelu_erf}, {"exp", exp}, {"exp_fast_expf", exp_fast}};
  for (auto [name, f] : binary) {
    benchmark::RegisterBenchmark((std::string(name) + "/f32/16M").c_str(), BM_Binary<kFloat32>, f)->UseRealTime();
    benchmark::RegisterBenchmark((std::string(name) + "/bf16/16M").c_str(), BM_Binary<kBFloat16>, f)->UseRealTime();
  }
  for (auto [name, f] : unary) {
    benchmark::RegisterBenchmark((std::string(name) + "/f32/16M").c_str(), BM_Unary<kFloat32>, f)->UseRealTime();
    benchmark::RegisterBenchmark((std::string(name) + "/bf16/16M").c_str(), BM_Unary<kBFloat16>, f)->UseRealTime();
  }
}

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  mantissa::measure_stream();
  mantissa::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
