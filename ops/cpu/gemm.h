// GEMM over raw pointers, row-major: C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C.
// f32/f64 go to BLAS. f16/bf16 take 16-bit operands, accumulate in fp32 and round once into C
// (the tensor-core contract), so results do not depend on how k is split.
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace mantissa::cpu {

enum class Trans : bool { kNo = false, kYes = true };

template <typename T>
struct GemmArgs {
  Trans trans_a = Trans::kNo;
  Trans trans_b = Trans::kNo;
  int64_t m = 0, n = 0, k = 0;
  const T* a = nullptr;
  int64_t lda = 0;  // row stride of A as stored ([m, k], or [k, m] when transposed)
  const T* b = nullptr;
  int64_t ldb = 0;
  T* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0 means C is only written (never read, so it may hold garbage or nan)
};

void gemm(const GemmArgs<float>& args);
void gemm(const GemmArgs<double>& args);
void gemm(const GemmArgs<Half>& args);
void gemm(const GemmArgs<BFloat16>& args);

}  // namespace mantissa::cpu
