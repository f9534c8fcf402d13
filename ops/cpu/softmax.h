// Softmax and log-softmax kernels over raw pointers. The input is viewed as [outer, dim, inner] in
// row-major order (contiguous); the reduction runs along `dim`. inner == 1 (the last dim) takes a
// fast path over contiguous rows. Values compute in compute_t<T> and round once at the store.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ops/cpu/vec_math.h"

namespace mantissa::cpu {

enum class SoftmaxKind { kSoftmax, kLogSoftmax };

struct SoftmaxGeometry {
  int64_t outer = 1;
  int64_t dim = 1;
  int64_t inner = 1;
};

// A contiguous tensor of `shape` seen as [outer, size(dim), inner] (one row of one element for 0-d).
inline SoftmaxGeometry softmax_geometry(const std::vector<int64_t>& shape, int64_t dim) {
  SoftmaxGeometry g;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) g.outer *= shape[d];
    if (d > dim) g.inner *= shape[d];
  }
  g.dim = shape.empty() ? 1 : shape[dim];
  return g;
}

// y = softmax(x) or log_softmax(x) along the middle axis.
template <typename T>
void softmax_forward(const T* x, T* y, SoftmaxGeometry g, SoftmaxKind kind);

// dx from the upstream grad dy and the forward output y:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T>
void softmax_backward(const T* dy, const T* y, T* dx, SoftmaxGeometry g, SoftmaxKind kind);

}  // namespace mantissa::cpu
