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
#include "ops/softmax/softmax.h"

namespace mantissa::cpu {

// y = softmax(x) or log_softmax(x) along the middle axis.
template <typename T>
void softmax_forward(const T* x, T* y, RowGeometry g, SoftmaxKind kind);

// dx from the upstream grad dy and the forward output y:
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)
template <typename T>
void softmax_backward(const T* dy, const T* y, T* dx, RowGeometry g, SoftmaxKind kind);

}  // namespace mantissa::cpu
