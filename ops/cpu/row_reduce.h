// Reductions over one contiguous row, written with kLanes independent accumulators so that the compiler
// vectorizes them (a single running max or sum is a serial dependency it may not reorder). Values compute
// in compute_t<T>. Shared by softmax (ops/softmax/softmax_cpu.cc) and the fused attention.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "framework/dtype.h"
#include "ops/cpu/vec_math.h"

namespace mantissa::cpu {

inline constexpr int64_t kLanes = 16;

// The row's max; a NaN may be dropped (softmax's sum of exps turns it into NaN anyway).

template <typename T>
inline compute_t<T> row_max(const T* x, int64_t n) {
  using C = compute_t<T>;
  C lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -std::numeric_limits<C>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = std::max(lanes[l], static_cast<C>(x[i + l]));
  }
  for (; i < n; ++i) lanes[0] = std::max(lanes[0], static_cast<C>(x[i]));
  return *std::max_element(lanes, lanes + kLanes);
}

// sum(exp(x - m)); also stores the exps in e when e is not null.
template <typename T>
inline compute_t<T> row_sum_exp(const T* x, int64_t n, compute_t<T> m, compute_t<T>* e) {
  using C = compute_t<T>;
  C lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const C v = exp_compute<C>(static_cast<C>(x[i + l]) - m);
      if (e) e[i + l] = v;
      lanes[l] += v;
    }
  }
  for (; i < n; ++i) {
    const C v = exp_compute<C>(static_cast<C>(x[i]) - m);
    if (e) e[i] = v;
    lanes[0] += v;
  }
  C s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
  return s;
}

// sum(a * b) (b null: sum(a)) over a contiguous row.
template <typename T>
inline compute_t<T> row_dot(const T* a, const T* b, int64_t n) {
  using C = compute_t<T>;
  C lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      lanes[l] += static_cast<C>(a[i + l]) * (b ? static_cast<C>(b[i + l]) : C(1));
    }
  }
  for (; i < n; ++i) lanes[0] += static_cast<C>(a[i]) * (b ? static_cast<C>(b[i]) : C(1));
  C s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
  return s;
}

}  // namespace mantissa::cpu
