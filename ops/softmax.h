// softmax and log_softmax over any dim, numerically stable (the max is subtracted first), with their
// backward. f32, f64, f16, bf16; 16-bit inputs compute in fp32 and round once at the output.
#pragma once

#include "framework/tensor.h"

namespace mantissa {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace mantissa
