// The CUDA kernels of ops/softmax/softmax.cc (ops/softmax/softmax.cu: a warp or a block per row, online max/sum).
// Declared in every build; defined in softmax.cu, which only CUDA builds
// compile.
#pragma once

#include <cstdint>

#include "framework/tensor.h"
#include "ops/softmax/softmax.h"

namespace mantissa {

// y = softmax(x) or log_softmax(x) along dim; x and y contiguous, non-empty.
void cuda_softmax(const Tensor& x, const Tensor& y, int64_t dim, SoftmaxKind kind);
// dx from the upstream dy and the forward output y (all contiguous, non-empty).
void cuda_softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, int64_t dim, SoftmaxKind kind);

}  // namespace mantissa
