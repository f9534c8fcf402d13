// Reductions over dims or over all elements: sum, mean, max (values and indices), var; and sum_to,
// the backward of broadcasting (ops/reduce/reduce.cc); logsumexp, prod, norm and cumsum
// (ops/reduce/logsumexp_prod_norm_cumsum.cc). 16-bit inputs accumulate in fp32 and round once.
#pragma once

#include <initializer_list>

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

enum class KeepDim : bool { kNo = false, kYes = true };

MT_OP(sum, kNone, kFp32);
Tensor sum(const Tensor& x);  // all elements -> 0-d
Tensor sum(const Tensor& x, const Shape& dims, KeepDim keepdim = KeepDim::kNo);
MT_OP(mean, kNone, kNone);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, KeepDim keepdim = KeepDim::kNo);
// Variance with Bessel's correction by default (correction = 1), as torch.var. Options are a struct
// so that no bare integer can be mistaken for a dim (torch.var(x, 1) means dim 1; here that is
// var(x, {1})).
struct VarOptions {
  int64_t correction = 1;
  KeepDim keepdim = KeepDim::kNo;
};
Tensor var(const Tensor& x, const Shape& dims, VarOptions options = {});
Tensor var(const Tensor& x, VarOptions options = {});  // all elements
// var(x, {1}) reduces dim 1 (a braced list always means dims).
inline Tensor var(const Tensor& x, std::initializer_list<int64_t> dims, VarOptions options = {}) {
  return var(x, Shape(dims), options);
}

struct MaxResult {
  Tensor values;
  Tensor indices;  // i64, the first index of the maximum along the dim
};
MaxResult max(const Tensor& x, int64_t dim, KeepDim keepdim = KeepDim::kNo);
Tensor max(const Tensor& x);  // 0-d; the gradient is shared evenly among tied maxima
Tensor argmax(const Tensor& x, int64_t dim, KeepDim keepdim = KeepDim::kNo);

MT_OP(logsumexp, kNone, kFp32);
// log(sum(exp(x))) over dims (all when empty), stable: the max is subtracted first.
Tensor logsumexp(const Tensor& x, const Shape& dims, KeepDim keepdim = KeepDim::kNo);
MT_OP(prod, kFp32, kFp32);
// Product of all elements (0-d), or along one dim. The gradient is exact with zeros in the input.
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t dim, KeepDim keepdim = KeepDim::kNo);
// Vector p-norm (sum |x|^p)^(1/p) over options.dims (all when empty); p = INFINITY is max |x|; p must be
// > 0. At a zero norm the gradient is 0 (a subgradient), as PyTorch. One options struct, so that
// norm(x, {.p = 1.0}) and norm(x, {.dims = {1}}) cannot be confused.
struct NormOptions {
  double p = 2.0;
  Shape dims = {};
  KeepDim keepdim = KeepDim::kNo;
};
MT_OP(norm, kNone, kFp32);
Tensor norm(const Tensor& x, NormOptions options = {});
MT_OP(cumsum, kNone, kFp32);
// Running sum along dim, accumulated in fp32 (f64 for f64) and rounded per output element.
Tensor cumsum(const Tensor& x, int64_t dim);

// Sums `grad` over the dims that broadcasting expanded, giving `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace mantissa
