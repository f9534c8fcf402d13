// The per-element math of the CUDA elementwise kernels as __host__ __device__ functions, so a g++ test
// runs the very formulas the GPU runs and compares them with the CPU kernels. Ops are named by an op
// code (the CUDA launchers cannot take the CPU's lambdas); C is float (f32/f16/bf16) or double.
// Products that feed an add go through mul_rn: nvcc would otherwise contract them into an fma, and
// the CPU (built without -ffp-contract) rounds the product first.
#pragma once

#include <math.h>

#include <cstdint>

#include "framework/host_device.h"

namespace mantissa::gpu {

// y = f(x [, s0, s1]) with scalars s0, s1 from the op (add's scalar, clamp's bounds, ...).
enum class UnaryOp : uint8_t {
  kNeg, kExp, kLog, kSqrt, kRsqrt, kAbs, kRelu, kGelu, kGeluTanh, kTanh, kSigmoid,
  kAddScalar, kSubScalar, kMulScalar, kDivScalar, kPowScalar, kSquare, kClamp,
};
// z = f(a, b [, s0, s1]). The *Backward codes take (grad, saved) as the CPU's backward functors do.
enum class BinaryOp : uint8_t {
  kAdd, kSub, kMul, kDiv, kPow,
  kMulBackward,        // g * saved (exp's backward, with the output saved)
  kLogBackward,        // g / x
  kSqrtBackward,       // g / (r + r)
  kRsqrtBackward,      // -0.5 g r^3
  kAbsBackward,        // sign(x) g
  kReluBackward,       // r > 0 ? g : 0
  kGeluBackward,       // g (Phi(x) + x phi(x))
  kGeluTanhBackward,
  kTanhBackward,       // g (1 - r^2)
  kSigmoidBackward,    // g r (1 - r)
  kClampBackward,      // s0 <= x <= s1 ? g : 0
  kPowScalarBackward,  // g s0 x^s1, s1 = s0 - 1 computed in double as the CPU does
  kSquaredDiff,        // (a - b)^2
  kScaledMul,          // a s0 b (addcmul's backward)
  kScaledDiv,          // a s0 / b (addcdiv's backward)
};
enum class TernaryOp : uint8_t {
  kDivBackwardOther,  // -g a / (b b)
  kPowBackwardSelf,   // e == 0 ? 0 : g e x^(e - 1)   (g, x, e)
  kPowBackwardExp,    // x == 0 ? 0 : g r log(x)     (g, x, r)
  kAddcmul,           // s + s0 a b
  kAddcdiv,           // s + s0 a / b
  kAddcdivBackward,   // -g s0 a / (b b)
  kScaledDiffGrad,    // s0 g (a - b): mse and var backward
};
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };

// The op and its scalars as the kernels receive them (by value).
template <typename Op>
struct PointwiseOp {
  Op op;
  double s0 = 0, s1 = 0;
};

MT_HD inline float hd_exp(float x) { return ::expf(x); }
MT_HD inline double hd_exp(double x) { return ::exp(x); }
MT_HD inline float hd_log(float x) { return ::logf(x); }
MT_HD inline double hd_log(double x) { return ::log(x); }
MT_HD inline float hd_sqrt(float x) { return ::sqrtf(x); }
MT_HD inline double hd_sqrt(double x) { return ::sqrt(x); }
MT_HD inline float hd_tanh(float x) { return ::tanhf(x); }
MT_HD inline double hd_tanh(double x) { return ::tanh(x); }
MT_HD inline float hd_erf(float x) { return ::erff(x); }
MT_HD inline double hd_erf(double x) { return ::erf(x); }
MT_HD inline float hd_pow(float x, float e) { return ::powf(x, e); }
MT_HD inline double hd_pow(double x, double e) { return ::pow(x, e); }
MT_HD inline float hd_fabs(float x) { return ::fabsf(x); }
MT_HD inline double hd_fabs(double x) { return ::fabs(x); }
MT_HD inline float hd_fma(float a, float b, float c) { return ::fmaf(a, b, c); }
MT_HD inline double hd_fma(double a, double b, double c) { return ::fma(a, b, c); }

// a * b rounded on its own (never fused into a following add).
MT_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MT_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

template <typename C> MT_HD inline bool is_nan(C x) { return x != x; }

// GELU constants: 1/sqrt(2), 1/sqrt(2 pi), sqrt(2/pi).
inline constexpr double kInvSqrt2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;

template <typename C>
MT_HD inline C gelu_value(C v) {
  return mul_rn(v, C(0.5)) * (C(1) + hd_erf(mul_rn(v, C(kInvSqrt2))));
}
template <typename C>
MT_HD inline C gelu_grad(C g, C v) {
  const C cdf = C(0.5) * (C(1) + hd_erf(mul_rn(v, C(kInvSqrt2))));
  const C pdf = hd_exp(C(-0.5) * v * v) * C(kInvSqrt2Pi);
  return g * hd_fma(v, pdf, cdf);  // an explicit fma, as the CPU's gelu_erf_grad
}
template <typename C>
MT_HD inline C gelu_tanh_value(C v) {
  const C beta = C(kSqrt2OverPi), kappa = C(0.044715);
  return C(0.5) * v * (C(1) + hd_tanh(beta * (v + mul_rn(mul_rn(kappa * v, v), v))));
}
template <typename C>
MT_HD inline C gelu_tanh_grad(C g, C v) {
  const C beta = C(kSqrt2OverPi), kappa = C(0.044715);
  const C t = hd_tanh(beta * (v + mul_rn(mul_rn(kappa * v, v), v)));
  const C dinner = beta * (C(1) + mul_rn(mul_rn(C(3) * kappa, v), v));
  return g * (mul_rn(C(0.5), C(1) + t) + mul_rn(mul_rn(C(0.5) * v, C(1) - mul_rn(t, t)), dinner));
}

template <typename C>
MT_HD inline C apply_unary(UnaryOp op, C x, C s0, C s1) {
  switch (op) {
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kExp: return hd_exp(x);
    case UnaryOp::kLog: return hd_log(x);
    case UnaryOp::kSqrt: return hd_sqrt(x);
    case UnaryOp::kRsqrt: return C(1) / hd_sqrt(x);
    case UnaryOp::kAbs: return hd_fabs(x);
    case UnaryOp::kRelu: return (x > C(0) || is_nan(x)) ? x : C(0);  // NaN passes through
    case UnaryOp::kGelu: return gelu_value(x);
    case UnaryOp::kGeluTanh: return gelu_tanh_value(x);
    case UnaryOp::kTanh: return hd_tanh(x);
    case UnaryOp::kSigmoid: return C(1) / (C(1) + hd_exp(-x));
    case UnaryOp::kAddScalar: return x + s0;
    case UnaryOp::kSubScalar: return x - s0;
    case UnaryOp::kMulScalar: return x * s0;
    case UnaryOp::kDivScalar: return x / s0;
    case UnaryOp::kPowScalar: return hd_pow(x, s0);
    case UnaryOp::kSquare: return x * x;
    case UnaryOp::kClamp:
      if (is_nan(x)) return x;
      return x < s0 ? s0 : (x > s1 ? s1 : x);
  }
  return x;
}

template <typename C>
MT_HD inline C apply_binary(BinaryOp op, C a, C b, C s0, C s1) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kPow: return hd_pow(a, b);
    case BinaryOp::kMulBackward: return a * b;
    case BinaryOp::kLogBackward: return a / b;
    case BinaryOp::kSqrtBackward: return a / (b + b);
    case BinaryOp::kRsqrtBackward: return C(-0.5) * a * b * b * b;
    case BinaryOp::kAbsBackward: return b > C(0) ? a : (b < C(0) ? -a : C(0));
    case BinaryOp::kReluBackward: return b > C(0) ? a : C(0);
    case BinaryOp::kGeluBackward: return gelu_grad(a, b);
    case BinaryOp::kGeluTanhBackward: return gelu_tanh_grad(a, b);
    case BinaryOp::kTanhBackward: return a * (C(1) - mul_rn(b, b));
    case BinaryOp::kSigmoidBackward: return a * b * (C(1) - b);
    case BinaryOp::kClampBackward: return (b >= s0 && b <= s1) ? a : C(0);
    case BinaryOp::kPowScalarBackward: return a * s0 * hd_pow(b, s1);
    case BinaryOp::kSquaredDiff: return (a - b) * (a - b);
    case BinaryOp::kScaledMul: return a * s0 * b;
    case BinaryOp::kScaledDiv: return a * s0 / b;
  }
  return a;
}

template <typename C>
MT_HD inline C apply_ternary(TernaryOp op, C a, C b, C c, C s0) {
  switch (op) {
    case TernaryOp::kDivBackwardOther: return -a * b / (c * c);
    case TernaryOp::kPowBackwardSelf: return c == C(0) ? C(0) : a * c * hd_pow(b, c - C(1));
    case TernaryOp::kPowBackwardExp: return b == C(0) ? C(0) : a * c * hd_log(b);
    case TernaryOp::kAddcmul: return a + mul_rn(s0 * b, c);
    case TernaryOp::kAddcdiv: return a + s0 * b / c;
    case TernaryOp::kAddcdivBackward: return -a * s0 * b / (c * c);
    case TernaryOp::kScaledDiffGrad: return s0 * a * (b - c);
  }
  return a;
}

template <typename C>
MT_HD inline bool apply_compare(CompareOp op, C a, C b) {
  switch (op) {
    case CompareOp::kEq: return a == b;
    case CompareOp::kNe: return a != b;
    case CompareOp::kLt: return a < b;
    case CompareOp::kLe: return a <= b;
    case CompareOp::kGt: return a > b;
    case CompareOp::kGe: return a >= b;
  }
  return false;
}

}  // namespace mantissa::gpu
