// 2-D pooling (PyTorch's max_pool2d and avg_pool2d, ceil_mode off): NCHW or unbatched CHW input,
// kernel, stride (0 = kernel) and implicit padding (at most half the kernel, as PyTorch requires).
// max_pool2d pads with -inf and routes the gradient to the first maximum of each window (NaN wins);
// avg_pool2d counts the zero padding in the divisor (count_include_pad, PyTorch's default).
#pragma once

#include <array>
#include <cstdint>

#include "framework/tensor.h"

namespace mantissa {

struct Pool2dOptions {
  std::array<int64_t, 2> kernel_size{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0: = kernel
  std::array<int64_t, 2> padding{0, 0};
};

Tensor max_pool2d(const Tensor& x, Pool2dOptions options);
Tensor avg_pool2d(const Tensor& x, Pool2dOptions options);  // count_include_pad as PyTorch's default

}  // namespace mantissa
