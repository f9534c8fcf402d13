// The CPU kernels of ops/reduce/reduce.cc (sum and mean, var, max along a dim and its backward) over raw
// pointers, and the plan they share with the CUDA kernels (ops/reduce/reduce.cu): which input dims
// are kept and which are reduced. Every output element reduces its slice with a strided inner walk, in
// parallel over outputs; 16-bit inputs accumulate in fp32 and round once.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/dtype.h"
#include "framework/parallel.h"
#include "framework/strided.h"
#include "ops/reduce/column_sum_cpu.h"

namespace mantissa::cpu {

struct ReducePlan {
  std::vector<bool> reduce;        // per input dim: reduced
  Shape out_shape_keep;            // input shape with reduced dims set to 1
  Shape out_shape;                 // as returned (reduced dims dropped unless keepdim)
  Shape kept_shape, kept_strides;  // outer dims (input strides)
  Shape reduced_shape, reduced_strides;
  int64_t reduced_numel = 1;
  bool leading_reduced = false;  // the reduced dims are exactly dims [0, k) for some k >= 1
};

// The same plan over an input of the same shape laid out with `strides`.
inline ReducePlan with_strides(ReducePlan p, const Shape& strides) {
  p.kept_strides.clear();
  p.reduced_strides.clear();
  for (size_t d = 0; d < strides.size(); ++d) (p.reduce[d] ? p.reduced_strides : p.kept_strides).push_back(strides[d]);
  return p;
}

// Calls body(out_index, base_offset) for every output element, in parallel; base_offset is the input
// element offset (from x's data pointer) where that output's reduced slice starts.
template <typename F>
void for_each_output(const ReducePlan& p, int64_t grain, F&& body) {
  const int64_t n_out = shape_numel(p.kept_shape);
  parallel_for(n_out, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t rem = o, base = 0;
      for (size_t d = p.kept_shape.size(); d-- > 0;) {
        base += (rem % p.kept_shape[d]) * p.kept_strides[d];
        rem /= p.kept_shape[d];
      }
      body(o, base);
    }
  });
}

// Calls f(value) for every element of one output's reduced slice, in memory order of the input.
template <typename T, typename F>
void for_each_reduced(const ReducePlan& p, const T* base, F&& f) {
  std::array<const Shape*, 1> st{&p.reduced_strides};
  strided_for_each<1>(p.reduced_shape, st, [&](int64_t n, const auto& off, const auto& s) {
    const T* q = base + off[0];
    if (s[0] == 1) {
      for (int64_t i = 0; i < n; ++i) f(q[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) f(q[i * s[0]]);
    }
  });
}

inline int64_t reduce_grain(const ReducePlan& p) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(p.reduced_numel, 1));
}

// out[o] = scale * sum of o's slice of x (x laid out as the plan says; contiguous tells whether it is).
template <typename T>
void sum_reduce(const ReducePlan& p, const T* xp, bool contiguous, double scale, T* op) {
  using A = compute_t<T>;  // sums accumulate in the compute type: f32, f64 for f64
  const int64_t cols = shape_numel(p.kept_shape);
  if (p.leading_reduced && contiguous && cols >= 16) {
    // [rows, cols] summed over rows, e.g. a bias gradient: the vectorized column sum (same bits).
    column_sum<T, A>(xp, p.reduced_numel, cols, static_cast<A>(scale), op);
    return;
  }
  for_each_output(p, reduce_grain(p), [&](int64_t o, int64_t base) {
    // Blocked (pairwise-ish) summation: partial sums of 8 lanes keep f32 error low and vectorize.
    A lanes[8] = {};
    int64_t k = 0;
    for_each_reduced<T>(p, xp + base, [&](T v) { lanes[k++ & 7] += static_cast<A>(v); });
    A total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    op[o] = static_cast<T>(static_cast<A>(total * static_cast<A>(scale)));
  });
}

// out[o] = sum over o's slice of (x - mean[o])^2 / denom (NaN when denom <= 0), two-pass: mean is the
// (16-bit-rounded for f16/bf16 inputs) mean, the squares are summed in the accumulator type.
template <typename T>
void var_reduce(const ReducePlan& p, const T* xp, const T* mp, double denom, T* op) {
  using A = compute_t<T>;  // sums accumulate in the compute type: f32, f64 for f64
  for_each_output(p, reduce_grain(p), [&](int64_t o, int64_t base) {
    const A mu = static_cast<A>(mp[o]);
    A acc = 0;
    for_each_reduced<T>(p, xp + base, [&](T v) {
      const A d = static_cast<A>(v) - mu;
      acc += d * d;
    });
    op[o] = static_cast<T>(denom > 0 ? acc / static_cast<A>(denom) : std::numeric_limits<A>::quiet_NaN());
  });
}

// values[o], indices[o] = the maximum of o's slice along one dim (n elements `step` apart) and its
// first index; a NaN wins and stops the walk, as in PyTorch.
template <typename T>
void max_reduce(const ReducePlan& p, const T* xp, int64_t n, int64_t step, T* vp, int64_t* ip) {
  for_each_output(p, reduce_grain(p), [&](int64_t o, int64_t base) {
    using C = compute_t<T>;
    C best = static_cast<C>(xp[base]);
    int64_t bi = 0;
    for (int64_t i = 1; i < n; ++i) {
      const C v = static_cast<C>(xp[base + i * step]);
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(best)) break;  // nan propagates, as in PyTorch
        if (std::isnan(v) || v > best) {
          best = v;
          bi = i;
        }
      } else {
        if (v > best) {
          best = v;
          bi = i;
        }
      }
    }
    vp[o] = static_cast<T>(best);
    ip[o] = bi;
  });
}

// The backward of max along a dim of [outer, n, inner]: dx (zeroed) gets g[a, c] at [a, idx[a, c], c].
template <typename T>
void max_backward_scatter(const T* gp, const int64_t* ip, int64_t outer, int64_t n, int64_t inner, T* dxp) {
  for (int64_t a = 0; a < outer; ++a) {
    for (int64_t c = 0; c < inner; ++c) {
      const int64_t o = a * inner + c;
      dxp[(a * n + ip[o]) * inner + c] = gp[o];
    }
  }
}

}  // namespace mantissa::cpu
