// GEMM over raw pointers, row-major: C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C.
// f32: oneDNN sgemm; f64: OpenBLAS; bf16: oneDNN matmul (AMX / AVX512_BF16) or widened to f32 on CPUs
// without them (bf16_gemm_path below); f16: widened to f32
// (gemm.cc says why; on a CPU with AVX512-FP16 or AMX-FP16 an f16 matmul of oneDNN 3.x would be faster,
// but Debian's oneDNN 2.6 has none: bench/RESULTS.md, issue 17). f16/bf16 take 16-bit operands, accumulate in fp32 and
// round once into C (the tensor-core contract). bf16 operands with an f32 C keep the fp32 accumulator unrounded (the
// FP8 emulation's GEMM: FP8 values are exact in bf16, their products exact in fp32). All threads come from the OpenMP
// pool that parallel_for uses.
#pragma once

#include <cstdint>
#include <string_view>

#include "framework/half.h"

namespace mantissa::cpu {

enum class Trans : bool { kNo = false, kYes = true };

// T: the operands' type; Out: C's (T, except bf16 operands into an f32 C).
template <typename T, typename Out = T>
struct GemmArgs {
  Trans trans_a = Trans::kNo;
  Trans trans_b = Trans::kNo;
  int64_t m = 0, n = 0, k = 0;
  const T* a = nullptr;
  int64_t lda = 0;  // row stride of A as stored ([m, k], or [k, m] when transposed)
  const T* b = nullptr;
  int64_t ldb = 0;
  Out* c = nullptr;
  int64_t ldc = 0;
  double alpha = 1.0;  // double so that f64 GEMMs scale exactly; f32/f16/bf16 use float(alpha)
  double beta = 0.0;   // 0 means C is only written (never read, so it may hold garbage or nan)
};

void gemm(const GemmArgs<float>& args);
void gemm(const GemmArgs<double>& args);
void gemm(const GemmArgs<Half>& args);
void gemm(const GemmArgs<BFloat16>& args);
void gemm(const GemmArgs<BFloat16, float>& args);

// Strided-batched form: for i in [0, batch): C_i = alpha * op(A_i) @ op(B_i) + beta * C_i, where
// X_i = X + i * stride_x. A stride of 0 broadcasts one matrix to every batch (stride_c must not be 0).
template <typename T, typename Out = T>
struct BatchedGemmArgs {
  GemmArgs<T, Out> gemm;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

void gemm_batched(const BatchedGemmArgs<float>& args);
void gemm_batched(const BatchedGemmArgs<double>& args);
void gemm_batched(const BatchedGemmArgs<Half>& args);
void gemm_batched(const BatchedGemmArgs<BFloat16>& args);
void gemm_batched(const BatchedGemmArgs<BFloat16, float>& args);

// How bf16 GEMMs run on this CPU: oneDNN's bf16 matmul where the CPU has bf16 dot products (AVX512_BF16,
// AMX), else operands widened to f32 through the f32 GEMM. Both keep the contract (bf16 operands, f32
// sums, one rounding); only the order of the f32 sums differs. Chosen once per process from the CPU;
// the environment variable MANTISSA_BF16_GEMM=native|widened overrides it (benchmarks, tests).
enum class Bf16GemmPath { kNative, kWidened };
Bf16GemmPath bf16_gemm_path();
std::string_view bf16_gemm_path_name(Bf16GemmPath path);

}  // namespace mantissa::cpu
