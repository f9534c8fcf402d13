// IEEE operations rounded exactly where they are written, the same on the host and the device, for the
// per-element code both compilers build (ops/pointwise_math.h, optim/update_math.h).
//
// The one hazard is contraction: nvcc fuses a * b + c into an fma by default, and so does g++ in C++
// (-ffp-contract=fast is its default outside ISO C, and -march=x86-64-v3 has FMA). So per-element code
// never lets a bare product meet an add or a subtract: it writes rn::fma(a, b, c) where one rounding is
// wanted and rn::mul(a, b) + c where two are. Everything else (+, -, *, / on their own) rounds once on
// every compiler and needs no help.
//
// rn::mul on the host is fma(a, b, -0.0): the exact product plus -0 rounded once is the rounded product,
// zeros' signs included, and no compiler contracts an fma into a following add. Unlike an asm register
// pin (what optim/update_math.h used before), it keeps CPU loops vectorizable: g++ 12 emits a packed
// vfmadd with a zero operand, then vaddps. One caveat: g++ rewrites -fma(a, b, c) as fnmsub, so -rn::mul(a, b)
// of a zero product may come back +0; write rn::mul(-a, b) where that sign matters.
#pragma once

#include <cmath>

#include "framework/host_device.h"

namespace mantissa::rn {

// a * b rounded on its own, never fused into a following add.
MT_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return std::fma(a, b, -0.0f);
#endif
}
MT_HD inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return std::fma(a, b, -0.0);
#endif
}

// a + b. On the device the _rn intrinsic also keeps a bare product operand from fusing into it; on the
// host write such a product with rn::mul (the rule above).
MT_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MT_HD inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// a / b, correctly rounded (also under nvcc's -prec-div=false).
MT_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
MT_HD inline double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// a * b + c rounded once.
MT_HD inline float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MT_HD inline double fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// sqrt(a), correctly rounded (also under nvcc's -prec-sqrt=false).
MT_HD inline float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
MT_HD inline double sqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

}  // namespace mantissa::rn
