// The per-element formulas of the elementwise ops, forward and backward, written once for the CPU and
// the GPU. The CPU functors in ops/elementwise/unary.cc, elementwise.cc and pointwise.cc call them by name; the CUDA
// kernels (ops/elementwise/elementwise.cu) cannot take those host lambdas, so an op passes an op code beside its
// functor and apply_unary/apply_binary/apply_ternary below turn the code into the same formula. C is the
// compute type: float (f32/f16/bf16) or double.
//
// Transcendental primitives come from a math policy M, so each formula is written once while each device
// picks its primitives: the CPU ops pass cpu::VecMath (ops/cpu/vec_math.h: exp and erf written to
// vectorize, within 2 ulp of libm, libm for the rest); the CUDA kernels use LibMath (CUDA's math library),
// and so do the host tests, which run these formulas under g++ against the CPU ops
// (tests/cuda/elementwise_plan_test.cc). Exact operations (+, -, *, /, sqrt, fabs) are the same everywhere.
//
// Roundings follow framework/rounding.h: no bare product meets an add. Where the CPU ops, built by g++
// with FMA contraction on, always fused a product into an add, the formula says fma, so the GPU rounds
// there too and both give the CPU's historical bits. Two spellings, one rounding:
//   M::fma(a, b, c)  in plain-arithmetic formulas (tanh's backward, addcmul). LibMath's is rn::fma;
//                    VecMath's is the expression a * b + c, which g++ contracts in the CPU op files. A
//                    call to std::fma there would cost speed: g++ does not version a loop for unit
//                    strides around a call, so ops/cpu/loops.h's strided loop (broadcasts, slices) would
//                    no longer vectorize (a broadcast addcmul about 3x slower in f32, 6x in bf16).
//   rn::fma(a, b, c) where the addend is itself a product (contraction could pick either product) or the
//                    formula calls libm anyway (tanh, the erf GELU's kernels): explicit on every compiler.
#pragma once

#include <cstdint>
#include <math.h>
#include <numbers>

#include "framework/host_device.h"
#include "framework/rounding.h"

namespace mantissa::gpu {

// y = f(x [, s0, s1]) with scalars s0, s1 from the op (add's scalar, clamp's bounds, ...).
enum class UnaryOp : uint8_t {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kAbs,
  kRelu,
  kGelu,
  kGeluTanh,
  kTanh,
  kSigmoid,
  kSilu,
  kAddScalar,
  kSubScalar,
  kMulScalar,
  kDivScalar,
  kPowScalar,
  kSquare,
  kClamp,
};
// z = f(a, b [, s0, s1]). The *Backward codes take (grad, saved) as the CPU's backward functors do.
enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMulBackward,    // g * saved (exp's backward, with the output saved)
  kLogBackward,    // g / x
  kSqrtBackward,   // g / (r + r)
  kRsqrtBackward,  // -0.5 g r^3
  kAbsBackward,    // sign(x) g
  kReluBackward,   // r > 0 ? g : 0
  kGeluBackward,   // g (Phi(x) + x phi(x))
  kGeluTanhBackward,
  kTanhBackward,       // g (1 - r^2)
  kSigmoidBackward,    // g r (1 - r)
  kSiluBackward,       // g s (1 + x (1 - s)), s = sigmoid(x)
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

// libm on the host, CUDA's math library on the device (also used directly by the softmax, norm and
// batch_norm kernels).
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

// a * b that nvcc keeps out of a following add, while the host's copy is a plain product that g++ may
// fuse. Used by the batch_norm and layer_norm kernels (cnn_math.h, norm.cu, batch_norm.cu), whose host
// tests compare with CPU kernels g++ compiled with contraction on. Not framework/rounding.h's rn::mul,
// which rounds on the host too; the formulas below use that one.
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

}  // namespace mantissa::gpu

// A formula is always inlined into the loop that calls it, on the host too: in a big translation unit
// (ops/elementwise/unary.cc instantiates every op for four dtypes, flat and strided) GCC's inline-unit-growth limit
// otherwise leaves some as calls, and a call keeps an element loop from vectorizing (sigmoid's serial
// path ran 7x slower). With the formulas and cpu::VecMath forced, the CPU ops' call graph is the one
// the lambdas had when they held the formulas; fast_expf/fast_erff stay ordinary inline functions
// (forcing them as well spent the budget on other loops).
#if defined(__CUDACC__)
#define MT_FORMULA __forceinline__ __host__ __device__
#else
#define MT_FORMULA [[gnu::always_inline]] inline
#endif

namespace mantissa::pointwise {

// The math policy of the CUDA kernels and the host tests: libm / CUDA's math library.
struct LibMath {
  template <typename C>
  MT_HD static C fma(C a, C b, C c) {
    return rn::fma(a, b, c);
  }
  template <typename C>
  MT_HD static C exp(C x) {
    return gpu::hd_exp(x);
  }
  template <typename C>
  MT_HD static C log(C x) {
    return gpu::hd_log(x);
  }
  template <typename C>
  MT_HD static C tanh(C x) {
    return gpu::hd_tanh(x);
  }
  template <typename C>
  MT_HD static C erf(C x) {
    return gpu::hd_erf(x);
  }
  template <typename C>
  MT_HD static C pow(C x, C e) {
    return gpu::hd_pow(x, e);
  }
};

// GELU constants, spelled as the CPU ops always computed them (in double, then rounded to C):
// 1/sqrt(2), 1/sqrt(2 pi), and tanh form's sqrt(2/pi) and cubic coefficient.
inline constexpr double kInvSqrt2 = std::numbers::sqrt2 / 2;
inline constexpr double kInvSqrt2Pi = std::numbers::inv_sqrtpi / std::numbers::sqrt2;
inline constexpr double kSqrt2OverPi = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;
inline constexpr double kGeluTanhKappa = 0.044715;

// ---- arithmetic (tensor-tensor and tensor-scalar)

template <typename C>
MT_FORMULA C add(C a, C b) {
  return a + b;
}
template <typename C>
MT_FORMULA C sub(C a, C b) {
  return a - b;
}
template <typename C>
MT_FORMULA C mul(C a, C b) {
  return a * b;
}
template <typename C>
MT_FORMULA C div(C a, C b) {
  return a / b;
}
template <typename C>
MT_FORMULA C neg(C x) {
  return -x;
}
template <typename C>
MT_FORMULA C square(C x) {
  return x * x;
}
template <typename M, typename C>
MT_FORMULA C pow(C x, C e) {
  return M::pow(x, e);
}

// d/da (a / b) = -g a / b^2 (d/da is div(g, b)).
template <typename C>
MT_FORMULA C div_backward_other(C g, C a, C b) {
  return -g * a / (b * b);
}
// d/dx x^e = e x^(e - 1); 0 where e == 0 (also for x == 0, where pow would give inf * 0).
template <typename M, typename C>
MT_FORMULA C pow_backward_self(C g, C x, C e) {
  return e == C(0) ? C(0) : g * e * M::pow(x, e - C(1));
}
// d/de x^e = x^e log(x) = r log(x); 0 where x == 0 (PyTorch's convention).
template <typename M, typename C>
MT_FORMULA C pow_backward_exponent(C g, C x, C r) {
  return x == C(0) ? C(0) : g * r * M::log(x);
}
// d/dx x^e for a scalar e; e_minus_1 is e - 1 computed in double.
template <typename M, typename C>
MT_FORMULA C pow_scalar_backward(C g, C x, C e, C e_minus_1) {
  return g * e * M::pow(x, e_minus_1);
}

// ---- math and activations; a backward takes (g, saved), saved the input x or the output r.

template <typename M, typename C>
MT_FORMULA C exp(C x) {
  return M::exp(x);
}
template <typename C>
MT_FORMULA C exp_backward(C g, C r) {
  return g * r;
}

template <typename M, typename C>
MT_FORMULA C log(C x) {
  return M::log(x);
}
template <typename C>
MT_FORMULA C log_backward(C g, C x) {
  return g / x;
}

template <typename C>
MT_FORMULA C sqrt(C x) {
  return rn::sqrt(x);
}
template <typename C>
MT_FORMULA C sqrt_backward(C g, C r) {
  return g / (r + r);
}

template <typename C>
MT_FORMULA C rsqrt(C x) {
  return C(1) / rn::sqrt(x);
}
template <typename C>
MT_FORMULA C rsqrt_backward(C g, C r) {
  return C(-0.5) * g * r * r * r;
}

template <typename C>
MT_FORMULA C abs(C x) {
  return gpu::hd_fabs(x);
}
template <typename C>
MT_FORMULA C abs_backward(C g, C x) {
  return x > C(0) ? g : (x < C(0) ? -g : C(0));
}

// NaN passes through, as in PyTorch (a NaN activation must reach the loss and the scaler).
template <typename C>
MT_FORMULA C relu(C x) {
  return (x > C(0) || x != x) ? x : C(0);
}
template <typename C>
MT_FORMULA C relu_backward(C g, C r) {
  return r > C(0) ? g : C(0);
}

template <typename M, typename C>
MT_FORMULA C tanh(C x) {
  return M::tanh(x);
}
template <typename M, typename C>
MT_FORMULA C tanh_backward(C g, C r) {
  return g * M::fma(-r, r, C(1));
}

template <typename M, typename C>
MT_FORMULA C sigmoid(C x) {
  return C(1) / (C(1) + M::exp(-x));
}
template <typename C>
MT_FORMULA C sigmoid_backward(C g, C r) {
  return g * r * (C(1) - r);
}

// SiLU (swish): x sigmoid(x), written x / (1 + e^-x) as PyTorch's kernels do (-inf gives NaN there too).
// dx = g s (1 + x (1 - s)) with s = sigmoid(x), from the saved input; the product x (1 - s) is fused into
// its add (M::fma), so both devices round it the same way.
template <typename M, typename C>
MT_FORMULA C silu(C x) {
  return x / (C(1) + M::exp(-x));
}
template <typename M, typename C>
MT_FORMULA C silu_backward(C g, C x) {
  const C s = C(1) / (C(1) + M::exp(-x));
  return g * s * M::fma(x, C(1) - s, C(1));
}

// GELU, erf form: x Phi(x), Phi the standard normal CDF; dx = g (Phi(x) + x phi(x)) with one explicit
// fma (the CPU's AVX2 and AVX-512 builds of ops/elementwise/gelu_cpu.cc and its strided path must agree).
template <typename M, typename C>
MT_FORMULA C gelu(C x) {
  return x * C(0.5) * (C(1) + M::erf(x * C(kInvSqrt2)));
}
template <typename M, typename C>
MT_FORMULA C gelu_backward(C g, C x) {
  const C cdf = C(0.5) * (C(1) + M::erf(x * C(kInvSqrt2)));
  const C pdf = M::exp(C(-0.5) * x * x) * C(kInvSqrt2Pi);
  return g * rn::fma(x, pdf, cdf);
}

// GELU, tanh form: 0.5 x (1 + tanh(beta (x + kappa x^3))), beta = sqrt(2/pi).
template <typename M, typename C>
MT_FORMULA C gelu_tanh(C x) {
  const C beta = C(kSqrt2OverPi), kappa = C(kGeluTanhKappa);
  return C(0.5) * x * (C(1) + M::tanh(beta * rn::fma(kappa * x * x, x, x)));
}
template <typename M, typename C>
MT_FORMULA C gelu_tanh_backward(C g, C x) {
  const C beta = C(kSqrt2OverPi), kappa = C(kGeluTanhKappa);
  const C t = M::tanh(beta * rn::fma(kappa * x * x, x, x));
  const C dinner = beta * rn::fma(C(3) * kappa * x, x, C(1));
  // 0.5 (1 + t) + 0.5 x (1 - t^2) dinner: the first product fused into the sum, the second rounded.
  return g * rn::fma(C(0.5), C(1) + t, C(0.5) * x * rn::fma(-t, t, C(1)) * dinner);
}

// clamp to [lo, hi]; NaN stays NaN. The gradient passes where lo <= x <= hi.
template <typename C>
MT_FORMULA C clamp(C x, C lo, C hi) {
  if (x != x) return x;
  return x < lo ? lo : (x > hi ? hi : x);
}
template <typename C>
MT_FORMULA C clamp_backward(C g, C x, C lo, C hi) {
  return (x >= lo && x <= hi) ? g : C(0);
}

// ---- addcmul / addcdiv: s + v a b and s + v a / b, and their backward.

template <typename M, typename C>
MT_FORMULA C addcmul(C s, C a, C b, C v) {
  return M::fma(v * a, b, s);
}
template <typename C>
MT_FORMULA C addcdiv(C s, C a, C b, C v) {
  return s + v * a / b;
}
// d/da addcmul = g v b (and g v a for b); d/da addcdiv = g v / b; d/db addcdiv = -g v a / b^2.
template <typename C>
MT_FORMULA C scaled_mul(C g, C other, C v) {
  return g * v * other;
}
template <typename C>
MT_FORMULA C scaled_div(C g, C b, C v) {
  return g * v / b;
}
template <typename C>
MT_FORMULA C addcdiv_backward(C g, C a, C b, C v) {
  return -g * v * a / (b * b);
}

// ---- used by ops/loss/loss.cc (mse), ops/reduce/reduce.cc (var) and ops/elementwise/compare.cc (clamp)

template <typename C>
MT_FORMULA C squared_diff(C a, C b) {
  return (a - b) * (a - b);
}
// k g (a - b): mse's and var's backward.
template <typename C>
MT_FORMULA C scaled_diff_grad(C k, C g, C a, C b) {
  return k * g * (a - b);
}

}  // namespace mantissa::pointwise

namespace mantissa::gpu {

// The op codes: each names its formula above. M is the math policy (LibMath on the device and in the
// host tests).
template <typename C, typename M = pointwise::LibMath>
MT_HD inline C apply_unary(UnaryOp op, C x, C s0, C s1) {
  namespace pw = pointwise;
  switch (op) {
    case UnaryOp::kNeg: return pw::neg(x);
    case UnaryOp::kExp: return pw::exp<M>(x);
    case UnaryOp::kLog: return pw::log<M>(x);
    case UnaryOp::kSqrt: return pw::sqrt(x);
    case UnaryOp::kRsqrt: return pw::rsqrt(x);
    case UnaryOp::kAbs: return pw::abs(x);
    case UnaryOp::kRelu: return pw::relu(x);
    case UnaryOp::kGelu: return pw::gelu<M>(x);
    case UnaryOp::kGeluTanh: return pw::gelu_tanh<M>(x);
    case UnaryOp::kTanh: return pw::tanh<M>(x);
    case UnaryOp::kSigmoid: return pw::sigmoid<M>(x);
    case UnaryOp::kSilu: return pw::silu<M>(x);
    case UnaryOp::kAddScalar: return pw::add(x, s0);
    case UnaryOp::kSubScalar: return pw::sub(x, s0);
    case UnaryOp::kMulScalar: return pw::mul(x, s0);
    case UnaryOp::kDivScalar: return pw::div(x, s0);
    case UnaryOp::kPowScalar: return pw::pow<M>(x, s0);
    case UnaryOp::kSquare: return pw::square(x);
    case UnaryOp::kClamp: return pw::clamp(x, s0, s1);
  }
  return x;
}

template <typename C, typename M = pointwise::LibMath>
MT_HD inline C apply_binary(BinaryOp op, C a, C b, C s0, C s1) {
  namespace pw = pointwise;
  switch (op) {
    case BinaryOp::kAdd: return pw::add(a, b);
    case BinaryOp::kSub: return pw::sub(a, b);
    case BinaryOp::kMul: return pw::mul(a, b);
    case BinaryOp::kDiv: return pw::div(a, b);
    case BinaryOp::kPow: return pw::pow<M>(a, b);
    case BinaryOp::kMulBackward: return pw::exp_backward(a, b);
    case BinaryOp::kLogBackward: return pw::log_backward(a, b);
    case BinaryOp::kSqrtBackward: return pw::sqrt_backward(a, b);
    case BinaryOp::kRsqrtBackward: return pw::rsqrt_backward(a, b);
    case BinaryOp::kAbsBackward: return pw::abs_backward(a, b);
    case BinaryOp::kReluBackward: return pw::relu_backward(a, b);
    case BinaryOp::kGeluBackward: return pw::gelu_backward<M>(a, b);
    case BinaryOp::kGeluTanhBackward: return pw::gelu_tanh_backward<M>(a, b);
    case BinaryOp::kTanhBackward: return pw::tanh_backward<M>(a, b);
    case BinaryOp::kSigmoidBackward: return pw::sigmoid_backward(a, b);
    case BinaryOp::kSiluBackward: return pw::silu_backward<M>(a, b);
    case BinaryOp::kClampBackward: return pw::clamp_backward(a, b, s0, s1);
    case BinaryOp::kPowScalarBackward: return pw::pow_scalar_backward<M>(a, b, s0, s1);
    case BinaryOp::kSquaredDiff: return pw::squared_diff(a, b);
    case BinaryOp::kScaledMul: return pw::scaled_mul(a, b, s0);
    case BinaryOp::kScaledDiv: return pw::scaled_div(a, b, s0);
  }
  return a;
}

template <typename C, typename M = pointwise::LibMath>
MT_HD inline C apply_ternary(TernaryOp op, C a, C b, C c, C s0) {
  namespace pw = pointwise;
  switch (op) {
    case TernaryOp::kDivBackwardOther: return pw::div_backward_other(a, b, c);
    case TernaryOp::kPowBackwardSelf: return pw::pow_backward_self<M>(a, b, c);
    case TernaryOp::kPowBackwardExp: return pw::pow_backward_exponent<M>(a, b, c);
    case TernaryOp::kAddcmul: return pw::addcmul<M>(a, b, c, s0);
    case TernaryOp::kAddcdiv: return pw::addcdiv(a, b, c, s0);
    case TernaryOp::kAddcdivBackward: return pw::addcdiv_backward(a, b, c, s0);
    case TernaryOp::kScaledDiffGrad: return pw::scaled_diff_grad(s0, a, b, c);
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
