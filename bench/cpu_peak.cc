// This CPU's arithmetic peak, measured: the GFLOP/s of a loop that does nothing but independent
// fused multiply-adds, for each vector instruction the CPU has, on 1 thread and on --threads threads.
// It is the denominator of the "fraction of peak" columns of bench/compare_pytorch.sh.
//   f32_fma_avx2       vfmadd231ps ymm: 8 lanes x 2 FLOP per instruction
//   f32_fma_avx512     vfmadd231ps zmm: 16 lanes x 2
//   bf16_dot_avx512    vdpbf16ps zmm (AVX512_BF16): 16 lanes x 2 bf16 products x 2, f32 accumulation
//   f16_fma_avx512     vfmadd231ph zmm (AVX512_FP16): 32 lanes x 2
// An instruction the CPU lacks is printed as "absent" (AMX tiles are reported the same way from cpuid).
// Each thread keeps 16 accumulators in flight (12 with AVX2's 16 registers), more than latency x issue
// width on current x86 cores.
//   bench/cpu_peak [--threads N] [--seconds S]
// Prints one line per instruction: "peak <name> threads=<n> gflops=<x> per_thread_1=<y>".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <string>
#include <thread>
#include <vector>

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

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  double seconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      threads = std::atoi(arg.c_str() + 10);
    } else if (arg.rfind("--seconds=", 0) == 0) {
      seconds = std::atof(arg.c_str() + 10);
    } else {
      std::fprintf(stderr, "cpu_peak: unknown argument '%s' (usage: cpu_peak [--threads=N] [--seconds=S])\n",
                   arg.c_str());
      return 2;
    }
  }
  if (threads < 1 || seconds <= 0) {
    std::fprintf(stderr, "cpu_peak: --threads must be >= 1 and --seconds > 0\n");
    return 2;
  }
  __builtin_cpu_init();
  const Kernel kernels[] = {
      {"f32_fma_avx2", __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0, 16, f32_fma_avx2,
       kAvx2Accumulators},
      {"f32_fma_avx512", __builtin_cpu_supports("avx512f") != 0, 32, f32_fma_avx512},
      {"bf16_dot_avx512", __builtin_cpu_supports("avx512bf16") != 0, 64, bf16_dot_avx512},
      {"f16_fma_avx512", __builtin_cpu_supports("avx512fp16") != 0, 64, f16_fma_avx512},
  };
  for (const Kernel& k : kernels) {
    if (!k.present) {
      std::printf("peak %s absent\n", k.name);
      continue;
    }
    const double single = measure(k, 1, seconds);
    const double all = measure(k, threads, seconds);
    std::printf("peak %s threads=%d gflops=%.1f per_thread_1=%.1f\n", k.name, threads, all, single);
    std::fflush(stdout);
  }
  for (const char* amx : {"amx_bf16", "amx_fp16"}) {
    if (!amx_present(amx))
      std::printf("peak %s absent\n", amx);
    else
      std::printf("peak %s present (not measured: AMX tiles need the kernel's permission, arch_prctl)\n", amx);
  }
  return 0;
}
