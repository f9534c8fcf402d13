// softmax and log_softmax over any dim, numerically stable (the max is subtracted first), with their
// backward. f32, f64, f16, bf16; 16-bit inputs compute in fp32 and round once at the output.
#pragma once

#include <cstdint>

#include "framework/host_device.h"
#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

// Which of the two a kernel computes (the CPU and the CUDA kernels take this one enum).
enum class SoftmaxKind : uint8_t { kSoftmax, kLogSoftmax };

// A contiguous [outer, dim, inner] tensor seen as outer * inner rows of `dim` elements with step `inner`:
// the geometry both devices' softmax and cross-entropy kernels take.
struct RowGeometry {
  int64_t outer = 1, dim = 1, inner = 1;
  MT_HD int64_t rows() const { return outer * inner; }
  MT_HD int64_t base(int64_t row) const { return (row / inner) * dim * inner + row % inner; }
};

// A contiguous tensor of `shape` seen as [outer, size(dim), inner] (one row of one element for 0-d).
inline RowGeometry softmax_rows(const Shape& shape, int64_t dim) {
  RowGeometry g;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) g.outer *= shape[d];
    if (d > dim) g.inner *= shape[d];
  }
  g.dim = shape.empty() ? 1 : shape[dim];
  return g;
}

MT_OP(softmax, kNone, kFp32);
Tensor softmax(const Tensor& x, int64_t dim);
MT_OP(log_softmax, kNone, kFp32);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace mantissa
