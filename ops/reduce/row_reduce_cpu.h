// Row kernels for logsumexp, prod and norm over a contiguous [m, n] matrix (each of the m rows reduces
// to one value), and the line kernel for cumsum over a contiguous [outer, size, inner] tensor. Values
// accumulate in the compute type C (float for f32/f16/bf16, double for f64) and round once.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "framework/dtype.h"
#include "framework/parallel.h"

namespace mantissa::cpu {

inline int64_t row_grain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

// out[r] = max + log(sum exp(x - max)); rows of only -inf give -inf, a row holding +inf gives +inf.
template <typename T>
void logsumexp_rows(const T* x, int64_t m, int64_t n, T* out) {
  using C = compute_t<T>;
  parallel_for(m, row_grain(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * n;
      C mx = -std::numeric_limits<C>::infinity();
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<C>(row[j]));
      if (std::isinf(mx)) {
        out[r] = static_cast<T>(mx);
        continue;
      }
      C s = 0;
      for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<C>(row[j]) - mx);
      out[r] = static_cast<T>(mx + std::log(s));
    }
  });
}

template <typename T>
void prod_rows(const T* x, int64_t m, int64_t n, T* out) {
  using C = compute_t<T>;
  parallel_for(m, row_grain(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      C p = 1;
      for (int64_t j = 0; j < n; ++j) p *= static_cast<C>(x[r * n + j]);
      out[r] = static_cast<T>(p);
    }
  });
}

// dx[r, j] = g[r] * (product of the row without element j): prefix times suffix products, so zeros in
// the row need no division.
template <typename T>
void prod_backward_rows(const T* x, const compute_t<T>* g, int64_t m, int64_t n, T* dx) {
  using C = compute_t<T>;
  parallel_for(m, row_grain(n), [&](int64_t begin, int64_t end) {
    std::vector<C> prefix(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * n;
      C acc = 1;
      for (int64_t j = 0; j < n; ++j) {
        prefix[j] = acc;
        acc *= static_cast<C>(row[j]);
      }
      C suffix = 1;
      for (int64_t j = n; j-- > 0;) {
        dx[r * n + j] = static_cast<T>(g[r] * prefix[j] * suffix);
        suffix *= static_cast<C>(row[j]);
      }
    }
  });
}

// out[r] = (sum |x|^p)^(1/p), with exact forms for p = 1, 2 and inf (max |x|; nan propagates).
template <typename T>
void norm_rows(const T* x, int64_t m, int64_t n, double p, T* out) {
  using C = compute_t<T>;
  const C pc = static_cast<C>(p);
  parallel_for(m, row_grain(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * n;
      C acc = 0;
      if (std::isinf(p)) {
        for (int64_t j = 0; j < n; ++j) {
          const C a = std::abs(static_cast<C>(row[j]));
          acc = std::isnan(a) || std::isnan(acc) ? std::numeric_limits<C>::quiet_NaN() : std::max(acc, a);
        }
      } else if (p == 2.0) {
        for (int64_t j = 0; j < n; ++j) acc += static_cast<C>(row[j]) * static_cast<C>(row[j]);
        acc = std::sqrt(acc);
      } else if (p == 1.0) {
        for (int64_t j = 0; j < n; ++j) acc += std::abs(static_cast<C>(row[j]));
      } else {
        for (int64_t j = 0; j < n; ++j) acc += std::pow(std::abs(static_cast<C>(row[j])), pc);
        acc = std::pow(acc, C(1) / pc);
      }
      out[r] = static_cast<T>(acc);
    }
  });
}

enum class ScanDirection { kForward, kReverse };

// out[o, k, i] = sum of x[o, j, i] for j <= k (kForward) or j >= k (kReverse, cumsum's backward).
template <typename T>
void cumsum_lines(const T* x, int64_t outer, int64_t size, int64_t inner, ScanDirection direction, T* out) {
  using C = compute_t<T>;
  parallel_for(outer * inner, row_grain(size), [&](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line) {
      const int64_t base = (line / inner) * size * inner + line % inner;
      C acc = 0;
      for (int64_t k = 0; k < size; ++k) {
        const int64_t j = direction == ScanDirection::kForward ? k : size - 1 - k;
        acc += static_cast<C>(x[base + j * inner]);
        out[base + j * inner] = static_cast<T>(acc);
      }
    }
  });
}

}  // namespace mantissa::cpu
