// This CPU's arithmetic peak, measured (framework/cpu_peak.h): a loop of nothing but independent fused
// multiply-adds per vector instruction the CPU has.
#include "framework/cpu_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <immintrin.h>
#include <thread>
#include <vector>

namespace mantissa {
namespace {

constexpr int64_t kInner = 1 << 20;  // instructions per accumulator between clock reads

// The sum of a vector's f32 lanes (a store, not _mm512_reduce_add_ps: GCC 12's warns of an
// uninitialized temporary).
__attribute__((target("avx512f"))) float lane_sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

// Each kernel runs `reps` x kInner x (its accumulators) instructions and returns a value that depends on all of them.
// AVX2 has 16 ymm registers: 12 accumulators and the two operands fit (16 would spill to the stack).
constexpr int kAvx2Accumulators = 12;
__attribute__((target("avx2,fma"))) float f32_fma_avx2(int64_t reps) {
  __m256 acc[kAvx2Accumulators];
  for (int i = 0; i < kAvx2Accumulators; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t r = 0; r < reps * kInner; ++r) {
    for (int i = 0; i < kAvx2Accumulators; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kAvx2Accumulators; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f"))) float f32_fma_avx512(int64_t reps) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t r = 0; r < reps * kInner; ++r) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return lane_sum(s);
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_avx512(int64_t reps) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(3e-4f));
  for (int64_t r = 0; r < reps * kInner; ++r) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return lane_sum(s);
}

__attribute__((target("avx512f,avx512fp16"))) float f16_fma_avx512(int64_t reps) {
  __m512h acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ph(static_cast<_Float16>(i * 1e-3f));
  const __m512h a = _mm512_set1_ph(static_cast<_Float16>(0.999f)), b = _mm512_set1_ph(static_cast<_Float16>(1e-4f));
  for (int64_t r = 0; r < reps * kInner; ++r) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ph(acc[i], a, b);
  }
  __m512h s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ph(s, acc[i]);
  return lane_sum(_mm512_castph_ps(s));  // the bits only need to depend on every lane
}

struct Kernel {
  const char* name;
  bool present;
  double flops_per_instruction;
  float (*run)(int64_t);
  int accumulators = 16;
};

bool amx_present(const char* feature) {  // from /proc/cpuinfo's flags (amx_bf16, amx_fp16)
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return false;
  char line[8192];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "flags", 5) == 0) found = std::strstr(line, feature) != nullptr;
  }
  std::fclose(f);
  return found;
}

// GFLOP/s of `threads` threads each running `k` for about `seconds`.
double measure(const Kernel& k, int threads, double seconds) {
  using clock = std::chrono::steady_clock;
  // Calibrate: reps for ~seconds on one thread.
  auto t0 = clock::now();
  volatile float sink = k.run(1);
  const double one = std::chrono::duration<double>(clock::now() - t0).count();
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(seconds / one));
  std::vector<std::thread> pool;
  t0 = clock::now();
  for (int t = 0; t < threads; ++t) pool.emplace_back([&] { sink = k.run(reps); });
  for (auto& th : pool) th.join();
  const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  (void)sink;
  const double instructions = static_cast<double>(threads) * static_cast<double>(reps) * kInner * k.accumulators;
  return instructions * k.flops_per_instruction / elapsed * 1e-9;
}

}  // namespace

std::vector<CpuPeak> measure_cpu_peaks(int threads, double seconds) {
  __builtin_cpu_init();
  const Kernel kernels[] = {
      {"f32_fma_avx2", __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0, 16, f32_fma_avx2,
       kAvx2Accumulators},
      {"f32_fma_avx512", __builtin_cpu_supports("avx512f") != 0, 32, f32_fma_avx512},
      {"bf16_dot_avx512", __builtin_cpu_supports("avx512bf16") != 0, 64, bf16_dot_avx512},
      {"f16_fma_avx512", __builtin_cpu_supports("avx512fp16") != 0, 64, f16_fma_avx512},
  };
  std::vector<CpuPeak> out;
  for (const Kernel& k : kernels) {
    CpuPeak p{.name = k.name, .present = k.present};
    if (k.present) {
      p.per_thread_1 = measure(k, 1, seconds);
      p.gflops = threads == 1 ? p.per_thread_1 : measure(k, threads, seconds);
    }
    out.push_back(p);
  }
  for (const char* amx : {"amx_bf16", "amx_fp16"}) out.push_back({.name = amx, .present = amx_present(amx)});
  return out;
}

double gemm_peak_gflops(const std::vector<CpuPeak>& peaks, DType dtype) {
  auto find = [&](const char* name) {
    for (const CpuPeak& p : peaks) {
      if (p.name == name && p.present && p.gflops > 0) return p.gflops;
    }
    return 0.0;
  };
  const double f32 = std::max(find("f32_fma_avx512"), find("f32_fma_avx2"));
  if (dtype == DType::kBF16 && find("bf16_dot_avx512") > 0) return find("bf16_dot_avx512");
  if (dtype == DType::kF16 && find("f16_fma_avx512") > 0) return find("f16_fma_avx512");
  return f32;  // f32 and f64 GEMMs, and 16-bit ones the CPU widens to f32
}

}  // namespace mantissa
