// Softmax / log-softmax forward and backward over [outer, dim, inner]. The last-dim case (inner == 1)
// walks contiguous rows; otherwise the `inner` lanes are processed side by side so the inner loop stays
// contiguous. Rows are independent and split over threads.
#include "ops/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/dtype.h"
#include "framework/parallel.h"

namespace mantissa::cpu {
namespace {

// Rows of the last dim: y[i] over one row x[0, n).
template <typename T>
void forward_row(const T* x, T* y, int64_t n, SoftmaxKind kind, std::vector<compute_t<T>>& buf) {
  using C = compute_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<C>(x[i]));
  // An all -inf row gives nan (as PyTorch); a +inf max gives nan too, through inf - inf.
  C s = 0;
  if (kind == SoftmaxKind::kLogSoftmax) {
    for (int64_t i = 0; i < n; ++i) s += exp_compute<C>(static_cast<C>(x[i]) - m);
    // (x - m) - log(s), not x - (m + log(s)): the latter loses the low bits when |m| is large.
    const C ls = std::log(s);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((static_cast<C>(x[i]) - m) - ls);
    return;
  }
  // Softmax: the unnormalised exps go to y directly when T is the compute type, else to a float
  // buffer, so that 16-bit outputs round once.
  C* e = nullptr;
  if constexpr (std::is_same_v<T, C>) {
    e = y;
  } else {
    buf.resize(static_cast<size_t>(n));
    e = buf.data();
  }
  for (int64_t i = 0; i < n; ++i) {
    e[i] = exp_compute<C>(static_cast<C>(x[i]) - m);
    s += e[i];
  }
  const C inv = C(1) / s;
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(e[i] * inv);
}

// One outer slice [dim, inner] with inner > 1: reductions run over dim for all inner lanes at once.
template <typename T>
void forward_slice(const T* x, T* y, int64_t dim, int64_t inner, SoftmaxKind kind,
                   std::vector<compute_t<T>>& buf) {
  using C = compute_t<T>;
  buf.assign(static_cast<size_t>(2 * inner), C(0));
  C* m = buf.data();
  C* s = buf.data() + inner;
  std::fill(m, m + inner, -std::numeric_limits<C>::infinity());
  for (int64_t d = 0; d < dim; ++d) {
    const T* xr = x + d * inner;
    for (int64_t j = 0; j < inner; ++j) m[j] = std::max(m[j], static_cast<C>(xr[j]));
  }
  for (int64_t d = 0; d < dim; ++d) {
    const T* xr = x + d * inner;
    for (int64_t j = 0; j < inner; ++j) s[j] += exp_compute<C>(static_cast<C>(xr[j]) - m[j]);
  }
  if (kind == SoftmaxKind::kLogSoftmax) {
    for (int64_t j = 0; j < inner; ++j) s[j] = std::log(s[j]);
    for (int64_t d = 0; d < dim; ++d) {
      const T* xr = x + d * inner;
      T* yr = y + d * inner;
      for (int64_t j = 0; j < inner; ++j) yr[j] = static_cast<T>((static_cast<C>(xr[j]) - m[j]) - s[j]);
    }
    return;
  }
  for (int64_t j = 0; j < inner; ++j) s[j] = C(1) / s[j];
  for (int64_t d = 0; d < dim; ++d) {
    const T* xr = x + d * inner;
    T* yr = y + d * inner;
    for (int64_t j = 0; j < inner; ++j) yr[j] = static_cast<T>(exp_compute<C>(static_cast<C>(xr[j]) - m[j]) * s[j]);
  }
}

template <typename T>
void backward_row(const T* dy, const T* y, T* dx, int64_t n, SoftmaxKind kind) {
  using C = compute_t<T>;
  C s = 0;
  if (kind == SoftmaxKind::kSoftmax) {
    for (int64_t i = 0; i < n; ++i) s += static_cast<C>(dy[i]) * static_cast<C>(y[i]);
    for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<T>(static_cast<C>(y[i]) * (static_cast<C>(dy[i]) - s));
  } else {
    for (int64_t i = 0; i < n; ++i) s += static_cast<C>(dy[i]);
    for (int64_t i = 0; i < n; ++i) {
      dx[i] = static_cast<T>(static_cast<C>(dy[i]) - exp_compute<C>(static_cast<C>(y[i])) * s);
    }
  }
}

template <typename T>
void backward_slice(const T* dy, const T* y, T* dx, int64_t dim, int64_t inner, SoftmaxKind kind,
                    std::vector<compute_t<T>>& buf) {
  using C = compute_t<T>;
  buf.assign(static_cast<size_t>(inner), C(0));
  C* s = buf.data();
  for (int64_t d = 0; d < dim; ++d) {
    const int64_t o = d * inner;
    for (int64_t j = 0; j < inner; ++j) {
      s[j] += kind == SoftmaxKind::kSoftmax ? static_cast<C>(dy[o + j]) * static_cast<C>(y[o + j])
                                            : static_cast<C>(dy[o + j]);
    }
  }
  for (int64_t d = 0; d < dim; ++d) {
    const int64_t o = d * inner;
    for (int64_t j = 0; j < inner; ++j) {
      const C g = static_cast<C>(dy[o + j]), v = static_cast<C>(y[o + j]);
      dx[o + j] = static_cast<T>(kind == SoftmaxKind::kSoftmax ? v * (g - s[j]) : g - exp_compute<C>(v) * s[j]);
    }
  }
}

// Rows are split over threads when a chunk holds at least ~16K elements.
int64_t row_grain(const SoftmaxGeometry& g) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.dim * g.inner)); }

}  // namespace

template <typename T>
void softmax_forward(const T* x, T* y, SoftmaxGeometry g, SoftmaxKind kind) {
  const int64_t slice = g.dim * g.inner;
  parallel_for(g.outer, row_grain(g), [&](int64_t begin, int64_t end) {
    std::vector<compute_t<T>> buf;
    for (int64_t o = begin; o < end; ++o) {
      if (g.inner == 1) {
        forward_row<T>(x + o * slice, y + o * slice, g.dim, kind, buf);
      } else {
        forward_slice<T>(x + o * slice, y + o * slice, g.dim, g.inner, kind, buf);
      }
    }
  });
}

template <typename T>
void softmax_backward(const T* dy, const T* y, T* dx, SoftmaxGeometry g, SoftmaxKind kind) {
  const int64_t slice = g.dim * g.inner;
  parallel_for(g.outer, row_grain(g), [&](int64_t begin, int64_t end) {
    std::vector<compute_t<T>> buf;
    for (int64_t o = begin; o < end; ++o) {
      const int64_t off = o * slice;
      if (g.inner == 1) {
        backward_row<T>(dy + off, y + off, dx + off, g.dim, kind);
      } else {
        backward_slice<T>(dy + off, y + off, dx + off, g.dim, g.inner, kind, buf);
      }
    }
  });
}

#define MT_INSTANTIATE_(T)                                                                   \
  template void softmax_forward<T>(const T*, T*, SoftmaxGeometry, SoftmaxKind);             \
  template void softmax_backward<T>(const T*, const T*, T*, SoftmaxGeometry, SoftmaxKind)
MT_INSTANTIATE_(float);
MT_INSTANTIATE_(double);
MT_INSTANTIATE_(Half);
MT_INSTANTIATE_(BFloat16);
#undef MT_INSTANTIATE_

}  // namespace mantissa::cpu
