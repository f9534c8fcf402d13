// GELU (erf form) over contiguous arrays: y = x Phi(x) and dx = g (Phi(x) + x phi(x)), computed in f32
// for f32/f16/bf16 (16-bit blocks widened and rounded once) with the AVX-512 build of the loop where the
// CPU has it. The per-element formulas are the inline functions below, shared with the strided path.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

#include "framework/dtype.h"
#include "ops/cpu/vec_math.h"

namespace mantissa::cpu {

template <typename C>
inline C gelu_erf_value(C v) {
  return v * C(0.5) * (C(1) + erf_compute(v * C(std::numbers::sqrt2 / 2)));
}

template <typename C>
inline C gelu_erf_grad(C g, C v) {
  const C cdf = C(0.5) * (C(1) + erf_compute(v * C(std::numbers::sqrt2 / 2)));
  const C pdf = exp_compute(C(-0.5) * v * v) * C(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  // An explicit fma: left to -ffp-contract, the vectorized and the scalar (strided) loops may differ.
  return g * std::fma(v, pdf, cdf);
}

// T is float, Half or BFloat16 (f64 goes through the generic elementwise path).
template <typename T>
void gelu_erf_forward(const T* x, T* y, int64_t n);
template <typename T>
void gelu_erf_backward(const T* g, const T* x, T* dx, int64_t n);

// The AVX2 (baseline) build alone, whatever the CPU, for tests that compare it with the AVX-512 one.
void gelu_erf_forward_avx2(const float* x, float* y, int64_t n);
void gelu_erf_backward_avx2(const float* g, const float* x, float* dx, int64_t n);

}  // namespace mantissa::cpu
