// GELU (erf form) over contiguous arrays: y = x Phi(x) and dx = g (Phi(x) + x phi(x)), computed in f32
// for f32/f16/bf16 (16-bit blocks widened and rounded once) with the AVX-512 build of the loop where the
// CPU has it. The per-element formulas are pointwise::gelu and gelu_backward (ops/pointwise_math.h) with
// cpu::VecMath's vectorizing erf and exp, as on the strided path; the CUDA kernels run the same formulas
// with CUDA's erf and exp.
#pragma once

#include <cstdint>

#include "framework/dtype.h"

namespace mantissa::cpu {

// T is float, Half or BFloat16 (f64 goes through the generic elementwise path).
template <typename T>
void gelu_erf_forward(const T* x, T* y, int64_t n);
template <typename T>
void gelu_erf_backward(const T* g, const T* x, T* dx, int64_t n);

// The AVX2 (baseline) build alone, whatever the CPU, for tests that compare it with the AVX-512 one.
void gelu_erf_forward_avx2(const float* x, float* y, int64_t n);
void gelu_erf_backward_avx2(const float* g, const float* x, float* dx, int64_t n);

}  // namespace mantissa::cpu
