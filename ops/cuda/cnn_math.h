// Per-element and per-window math of the CUDA batch_norm and pooling kernels as __host__ __device__
// functions, written to perform the same IEEE operations in the same order as ops/norm/norm_cpu.cc,
// ops/pool/pool_cpu.cc and ops/norm/norm.cc; tests/cuda/cnn_math_test.cc runs them on the CPU against those.
#pragma once

#include <cstdint>

#include "ops/pointwise_math.h"
#include "ops/pool/pool_cpu.h"

namespace mantissa::gpu {

// ---- batch_norm. Statistics that ops/norm/norm.cc computes in f64 on the host are computed in f64 here too.

// running = (1 - momentum) * running + momentum * batch (each product rounded on its own, as the CPU).
MT_HD inline double bn_running_update(double old, double batch, double momentum) {
  return mul_rn(1.0 - momentum, old) + mul_rn(momentum, batch);
}
// The unbiased variance from the biased one over `count` values (count > 1).
MT_HD inline double bn_unbiased(double biased_var, int64_t count) {
  return mul_rn(biased_var, static_cast<double>(count) / static_cast<double>(count - 1));
}
MT_HD inline double bn_invstd(double var, double eps) { return 1.0 / hd_sqrt(var + eps); }

// y = (x - mean) * invstd * w + b; w = 1 and b = 0 when absent (the CPU applies them anyway).
template <typename C>
MT_HD inline C bn_apply(C x, C mean, C invstd, C w, C b) {
  return mul_rn(mul_rn(x - mean, invstd), w) + b;
}
// The summands of dbias and dweight: dy, and dy * xhat computed as (dy * (x - mean)) * invstd.
template <typename C>
MT_HD inline C bn_dy_xhat(C dy, C x, C mean, C invstd) {
  return mul_rn(mul_rn(dy, x - mean), invstd);
}
// dx = scale * (dy - mean_dy - xhat * mean_dy_xhat), scale = w * invstd; mean_dy = mean_dy_xhat = 0 in
// eval mode (the statistics are constants there).
template <typename C>
MT_HD inline C bn_input_grad(C dy, C x, C mean, C invstd, C scale, C mean_dy, C mean_dy_xhat) {
  const C xhat = mul_rn(x - mean, invstd);
  return scale * (dy - mean_dy - mul_rn(xhat, mean_dy_xhat));
}

// ---- pooling over one [H, W] plane.

// A half-open rectangle [y0, y1) x [x0, x1).
struct PoolSpan {
  int64_t y0, y1, x0, x1;
};

// The input window of output (oy, ox), clipped to the input (padding never contributes a value).
MT_HD inline PoolSpan pool_window(const cpu::Pool2dGeometry& g, int64_t oy, int64_t ox) {
  const int64_t ys = oy * g.stride_h - g.pad_h, xs = ox * g.stride_w - g.pad_w;
  return {ys > 0 ? ys : 0, ys + g.kh < g.h ? ys + g.kh : g.h, xs > 0 ? xs : 0, xs + g.kw < g.w ? xs + g.kw : g.w};
}

// The outputs whose windows contain input (iy, ix): oy with oy*s - p <= iy < oy*s - p + k, within [0, OH).
MT_HD inline void pool_covering_1d(int64_t i, int64_t k, int64_t s, int64_t p, int64_t out, int64_t& o0, int64_t& o1) {
  o0 = i + p < k ? 0 : (i + p - k) / s + 1;
  const int64_t last = (i + p) / s + 1;
  o1 = last < out ? last : out;
}
MT_HD inline PoolSpan pool_covering(const cpu::Pool2dGeometry& g, int64_t iy, int64_t ix) {
  PoolSpan r{};
  pool_covering_1d(iy, g.kh, g.stride_h, g.pad_h, g.oh, r.y0, r.y1);
  pool_covering_1d(ix, g.kw, g.stride_w, g.pad_w, g.ow, r.x0, r.x1);
  return r;
}

// The plane index (iy * W + ix) of the first maximum of output (oy, ox)'s window, scanned row by row; a
// NaN replaces the running maximum (as PyTorch). `at(i)` gives the plane's value i in the compute type C.
template <typename C, typename At>
MT_HD inline int64_t max_pool_argmax(const cpu::Pool2dGeometry& g, int64_t oy, int64_t ox, const At& at) {
  const PoolSpan win = pool_window(g, oy, ox);
  C best = -static_cast<C>(INFINITY);
  int64_t best_i = win.y0 * g.w + win.x0;
  for (int64_t iy = win.y0; iy < win.y1; ++iy) {
    for (int64_t ix = win.x0; ix < win.x1; ++ix) {
      const C v = at(iy * g.w + ix);
      if (v > best || v != v) {
        best = v;
        best_i = iy * g.w + ix;
      }
    }
  }
  return best_i;
}

// The window's sum (from 0, row by row) over KH * KW: count_include_pad, divided as the CPU.
template <typename C, typename At>
MT_HD inline C avg_pool_value(const cpu::Pool2dGeometry& g, int64_t oy, int64_t ox, const At& at) {
  const PoolSpan win = pool_window(g, oy, ox);
  C s = 0;
  for (int64_t iy = win.y0; iy < win.y1; ++iy) {
    for (int64_t ix = win.x0; ix < win.x1; ++ix) s += at(iy * g.w + ix);
  }
  return s / static_cast<C>(g.kh * g.kw);
}

// The gradient of input (iy, ix): dy of every covering output whose argmax it is, added from 0 in output
// order, the order in which the CPU's scatter adds them. dy_at(o) and index_at(o) read output o's values.
template <typename C, typename DyAt, typename IndexAt>
MT_HD inline C max_pool_input_grad(const cpu::Pool2dGeometry& g, int64_t iy, int64_t ix, const DyAt& dy_at,
                                   const IndexAt& index_at) {
  const PoolSpan cov = pool_covering(g, iy, ix);
  const int64_t self = iy * g.w + ix;
  C acc = 0;
  for (int64_t oy = cov.y0; oy < cov.y1; ++oy) {
    for (int64_t ox = cov.x0; ox < cov.x1; ++ox) {
      if (index_at(oy * g.ow + ox) == self) acc += dy_at(oy * g.ow + ox);
    }
  }
  return acc;
}

// avg_pool2d's input gradient: dy / (KH * KW) of every covering output, added in output order.
template <typename C, typename DyAt>
MT_HD inline C avg_pool_input_grad(const cpu::Pool2dGeometry& g, int64_t iy, int64_t ix, const DyAt& dy_at) {
  const PoolSpan cov = pool_covering(g, iy, ix);
  const C divisor = static_cast<C>(g.kh * g.kw);
  C acc = 0;
  for (int64_t oy = cov.y0; oy < cov.y1; ++oy) {
    for (int64_t ox = cov.x0; ox < cov.x1; ++ox) acc += dy_at(oy * g.ow + ox) / divisor;
  }
  return acc;
}

}  // namespace mantissa::gpu
