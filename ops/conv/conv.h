// 2-D convolution (PyTorch's conv2d), and conv1d on top of it: NCHW input, OIHW weight, optional bias; stride, padding,
// dilation and groups; backward for input, weight and bias. f32, f64, f16, bf16 (16-bit accumulate
// in fp32 and round once at the output, the tensor-core contract).
#pragma once

#include <array>
#include <cstdint>

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

MT_OP(conv2d, kLowerPrecision, kLowerPrecision);
// x [N, C, H, W] (or unbatched [C, H, W]), weight [O, C/groups, KH, KW], bias [O] or undefined.
// Returns [N, O, OH, OW] with OH = (H + 2*pad - dil*(KH-1) - 1) / stride + 1 (likewise OW).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv2dOptions options = {});

struct Conv1dOptions {
  int64_t stride = 1, padding = 0, dilation = 1;
  int64_t groups = 1;
};
MT_OP(conv1d, kLowerPrecision, kLowerPrecision);
// x [N, C, L] (or unbatched [C, L]), weight [O, C/groups, K], bias [O] or undefined -> [N, O, OL]: conv2d
// over a height-1 image (its kernels and backward).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv1dOptions options = {});

}  // namespace mantissa
