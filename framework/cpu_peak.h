// This CPU's arithmetic peak, measured: the GFLOP/s of a loop that does nothing but independent fused
// multiply-adds, for each vector instruction the CPU has, on 1 thread and on `threads` threads. The
// denominator of the "fraction of peak" figures (bench/cpu_peak, bench/compare_pytorch.sh, mantissa-train
// --report=speed).
//   f32_fma_avx2       vfmadd231ps ymm: 8 lanes x 2 FLOP per instruction
//   f32_fma_avx512     vfmadd231ps zmm: 16 lanes x 2
//   bf16_dot_avx512    vdpbf16ps zmm (AVX512_BF16): 16 lanes x 2 bf16 products x 2, f32 accumulation
//   f16_fma_avx512     vfmadd231ph zmm (AVX512_FP16): 32 lanes x 2
// An instruction the CPU lacks is `present = false` (AMX tiles are reported from /proc/cpuinfo, never
// measured: they need the kernel's permission). Each thread keeps 16 accumulators in flight (12 with AVX2's
// 16 registers), more than latency x issue width on current x86 cores.
#pragma once

#include <string>
#include <vector>

#include "framework/dtype.h"

namespace mantissa {

struct CpuPeak {
  std::string name;
  bool present = false;
  double gflops = 0;        // on `threads` threads
  double per_thread_1 = 0;  // on one
};

// Each instruction for about `seconds` (twice: one thread, then `threads`).
std::vector<CpuPeak> measure_cpu_peaks(int threads, double seconds = 0.5);

// The peak a GEMM in `dtype` can reach here: bf16 dot products for bf16 where the CPU has them, f16 FMAs for
// f16 likewise, else f32 FMAs (16-bit GEMMs widen to f32). 0 when nothing was measured.
double gemm_peak_gflops(const std::vector<CpuPeak>& peaks, DType dtype);

}  // namespace mantissa
