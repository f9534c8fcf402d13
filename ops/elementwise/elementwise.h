// Elementwise ops with broadcasting: arithmetic, math functions, activations, comparisons, where,
// masked_fill, clamp. Every floating op runs in f32, f64, f16 and bf16 (16-bit computes in fp32 and
// rounds once). Tensor-scalar forms keep the tensor's dtype, as PyTorch does with Python scalars.
#pragma once

#include <optional>

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

// Arithmetic (ops/elementwise/elementwise.cc).
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
// For fused kernels that compute a + b themselves (same shapes, the sum in the promoted dtype): gives `sum`
// the history add(a, b) would give it, so that its backward is add's.
void record_add(Tensor& sum, const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double b);
Tensor neg(const Tensor& a);
MT_OP(pow, kNone, kFp32);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Tensor& a, double exponent);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

MT_OP(addcmul, kNone, kPromote);
// self + value * t1 * t2 and self + value * t1 / t2, broadcasting all three (ops/elementwise/pointwise.cc). Computed
// in fp32 for 16-bit dtypes and rounded once; mixed dtypes promote (under CUDA autocast by the promote
// category, which gives the same dtype).
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);
MT_OP(addcdiv, kNone, kPromote);
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);

// Math and activations (ops/elementwise/unary.cc).
enum class GeluApproximation { kNone, kTanh };
MT_OP(exp, kNone, kFp32);
Tensor exp(const Tensor& x);
MT_OP(log, kNone, kFp32);
Tensor log(const Tensor& x);
MT_OP(sqrt, kNone, kNone);
Tensor sqrt(const Tensor& x);
MT_OP(rsqrt, kNone, kFp32);
Tensor rsqrt(const Tensor& x);
MT_OP(abs, kNone, kNone);
Tensor abs(const Tensor& x);
MT_OP(relu, kNone, kNone);
Tensor relu(const Tensor& x);
MT_OP(gelu, kNone, kNone);
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::kNone);
// grad * gelu'(x), differentiable again (create_graph): what gelu's backward computes, for fused ops whose
// backward composes it (linear_act).
Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApproximation approximate = GeluApproximation::kNone);
MT_OP(tanh, kNone, kNone);
Tensor tanh(const Tensor& x);
MT_OP(sigmoid, kNone, kNone);
Tensor sigmoid(const Tensor& x);
// SiLU (swish, torch.nn.functional.silu): x * sigmoid(x).
MT_OP(silu, kNone, kNone);
Tensor silu(const Tensor& x);

// Comparisons, selection and clamping (ops/elementwise/compare.cc). Comparisons return bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` wherever mask (bool, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);

}  // namespace mantissa
