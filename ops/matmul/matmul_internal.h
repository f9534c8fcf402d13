// What the matmul family's files share (not part of the public API): the GEMM primitive's kernel call and
// linear's argument checks.
#pragma once

#include <string_view>

#include "framework/tensor.h"

namespace mantissa {

// out[B, m, n] = alpha * a[Ba, m, k] @ b[Bb, k, n] + beta * bias, without autograd (ops/matmul/matmul.cc):
// one profiler event "matmul" with the product's FLOPs; simply transposed operands are read in place.
Tensor run_gemm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha);

// linear's checks of its (already cast) arguments, naming `op` in the messages: x [..., in], weight [out, in],
// bias [out] or undefined, one floating dtype, one device.
void check_linear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace mantissa
