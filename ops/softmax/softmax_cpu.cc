// Softmax / log-softmax forward and backward over [outer, dim, inner]. The last-dim case (inner == 1)
// walks contiguous rows; otherwise the `inner` lanes are processed side by side so the inner loop stays
// contiguous. Rows are independent and split over threads.
#include "ops/softmax/softmax_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/convert.h"
#include "framework/dtype.h"
#include "framework/parallel.h"
#include "ops/cpu/row_reduce.h"

namespace mantissa::cpu {
namespace {

// Rows of the last dim: y[i] over one row x[0, n).
template <typename T>
void forward_row(const T* x, T* y, int64_t n, SoftmaxKind kind, std::vector<compute_t<T>>& buf) {
  using C = compute_t<T>;
  if constexpr (!std::is_same_v<T, C>) {
    // 16-bit rows: widen the row once with the vectorized converter, run the float row in place in
    // buf, narrow once (the same values as converting element by element, so the same bits).
    buf.resize(static_cast<size_t>(n));
    convert(x, buf.data(), n);
    forward_row<C>(buf.data(), buf.data(), n, kind, buf);
    convert(buf.data(), y, n);
    return;
  } else {
    // An all -inf row gives nan (as PyTorch); so does a nan anywhere, through the sum. x may alias y.
    const C m = row_max(x, n);
    if (kind == SoftmaxKind::kLogSoftmax) {
      // (x - m) - log(s), not x - (m + log(s)): the latter loses the low bits when |m| is large.
      const C ls = std::log(row_sum_exp<T>(x, n, m, nullptr));
      for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - ls;
      return;
    }
    // The unnormalised exps go to y directly (row_sum_exp reads x[i] before it writes y[i]).
    const C inv = C(1) / row_sum_exp<T>(x, n, m, y);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// One outer slice [dim, inner] with inner > 1: reductions run over dim for all inner lanes at once.
template <typename T>
void forward_slice(const T* x, T* y, int64_t dim, int64_t inner, SoftmaxKind kind, std::vector<compute_t<T>>& buf) {
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
void backward_row(const T* dy, const T* y, T* dx, int64_t n, SoftmaxKind kind, std::vector<compute_t<T>>& buf) {
  using C = compute_t<T>;
  if constexpr (!std::is_same_v<T, C>) {
    // 16-bit rows: widen dy and y into buf, compute dx over the float rows (into the dy half), narrow once.
    buf.resize(static_cast<size_t>(2 * n));
    C* dyf = buf.data();
    C* yf = buf.data() + n;
    convert(dy, dyf, n);
    convert(y, yf, n);
    backward_row<C>(dyf, yf, dyf, n, kind, buf);
    convert(dyf, dx, n);
  } else {
    // dx may alias dy: each dx[i] is written after the row's sum and after its own dy[i] is read.
    if (kind == SoftmaxKind::kSoftmax) {
      const C s = row_dot<T>(dy, y, n);
      for (int64_t i = 0; i < n; ++i) dx[i] = y[i] * (dy[i] - s);
    } else {
      const C s = row_dot<T>(dy, nullptr, n);
      for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] - exp_compute<C>(y[i]) * s;
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
int64_t row_grain(const RowGeometry& g) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.dim * g.inner)); }

}  // namespace

template <typename T>
void softmax_forward(const T* x, T* y, RowGeometry g, SoftmaxKind kind) {
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
void softmax_backward(const T* dy, const T* y, T* dx, RowGeometry g, SoftmaxKind kind) {
  const int64_t slice = g.dim * g.inner;
  parallel_for(g.outer, row_grain(g), [&](int64_t begin, int64_t end) {
    std::vector<compute_t<T>> buf;
    for (int64_t o = begin; o < end; ++o) {
      const int64_t off = o * slice;
      if (g.inner == 1) {
        backward_row<T>(dy + off, y + off, dx + off, g.dim, kind, buf);
      } else {
        backward_slice<T>(dy + off, y + off, dx + off, g.dim, g.inner, kind, buf);
      }
    }
  });
}

#define MT_INSTANTIATE_(T)                                                  \
  template void softmax_forward<T>(const T*, T*, RowGeometry, SoftmaxKind); \
  template void softmax_backward<T>(const T*, const T*, T*, RowGeometry, SoftmaxKind)
MT_INSTANTIATE_(float);
MT_INSTANTIATE_(double);
MT_INSTANTIATE_(Half);
MT_INSTANTIATE_(BFloat16);
#undef MT_INSTANTIATE_

}  // namespace mantissa::cpu
