// softmax and log_softmax over any dim, numerically stable (the max is subtracted first), with their
// backward. f32, f64, f16, bf16; 16-bit inputs compute in fp32 and round once at the output.
#pragma once

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

MT_OP(softmax, kNone, kFp32);
Tensor softmax(const Tensor& x, int64_t dim);
MT_OP(log_softmax, kNone, kFp32);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace mantissa
