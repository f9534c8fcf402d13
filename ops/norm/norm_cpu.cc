// Fused layer_norm and batch_norm kernels. Statistics are two-pass (mean, then squared deviations) in
// the compute type. layer_norm runs in parallel over rows, batch_norm over channels.
#include "ops/norm/norm_cpu.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "framework/parallel.h"
#include "ops/cpu/compute_buffer.h"
#include "ops/pool/pool_cpu.h"

namespace mantissa::cpu {
namespace {

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// sum over j < n of f(j) in 8 interleaved partial sums: the compiler can vectorize it (a single running
// sum is a serial chain of dependent adds), and the error grows more slowly.
template <typename C, typename F>
C lane_sum(int64_t n, F&& f) {
  C lanes[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) lanes[k] += f(j + k);
  }
  for (; j < n; ++j) lanes[j & 7] += f(j);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// The n rows [i, c, :] of one batch-norm channel in the compute type: pointers into x for f32/f64; for
// 16-bit inputs one widened copy of the whole channel (n * S values, L2-sized for the CNN's activations),
// so that a second pass over the channel does not convert again.
template <typename T>
class ChannelRows {
 public:
  using C = compute_t<T>;
  ChannelRows(const BatchNormGeometry& g, const T* x) : g_(g), x_(x) {}
  void load(int64_t c) {
    c_ = c;
    if constexpr (!std::is_same_v<T, C>) {
      store_.resize(static_cast<size_t>(g_.n * g_.spatial));
      for (int64_t i = 0; i < g_.n; ++i)
        to_compute(x_ + (i * g_.channels + c) * g_.spatial, store_.data() + i * g_.spatial, g_.spatial);
    }
  }
  const C* row(int64_t i) const {
    if constexpr (std::is_same_v<T, C>) {
      return x_ + (i * g_.channels + c_) * g_.spatial;
    } else {
      return store_.data() + i * g_.spatial;
    }
  }

 private:
  const BatchNormGeometry& g_;
  const T* x_;
  int64_t c_ = 0;
  std::vector<C> store_;
};

}  // namespace

// One row of layer_norm in the compute type: out = (x - mean) * rstd * w + b, with its statistics.
template <typename C>
void normalize_row(const C* xr, int64_t N, const C* w, const C* b, double eps, C* out, C& mean, C& rstd) {
  const C mu = lane_sum<C>(N, [&](int64_t j) { return xr[j]; }) / static_cast<C>(N);
  const C ss = lane_sum<C>(N, [&](int64_t j) { return (xr[j] - mu) * (xr[j] - mu); });
  const C rs = C(1) / std::sqrt(ss / static_cast<C>(N) + static_cast<C>(eps));
  for (int64_t j = 0; j < N; ++j) {
    C v = (xr[j] - mu) * rs;
    if (w) v *= w[j];
    if (b) v += b[j];
    out[j] = v;
  }
  mean = mu;
  rstd = rs;
}

template <typename T>
void layer_norm_forward(const LayerNormGeometry& g, const T* x, const compute_t<T>* w, const compute_t<T>* b, T* y,
                        compute_t<T>* mean, compute_t<T>* rstd) {
  using C = compute_t<T>;
  const int64_t N = g.cols;
  parallel_for(g.rows, row_grain(N), [&](int64_t begin, int64_t end) {
    std::vector<C> row_store, out(static_cast<size_t>(N));
    for (int64_t r = begin; r < end; ++r) {
      const C* xr = compute_view(x + r * N, N, row_store);
      normalize_row<C>(xr, N, w, b, g.eps, out.data(), mean[r], rstd[r]);
      from_compute(out.data(), y + r * N, N);
    }
  });
}

template <typename T, typename D>
void add_layer_norm_forward(const LayerNormGeometry& g, const T* x, const D* delta, const compute_t<T>* w,
                            const compute_t<T>* b, T* sum, T* y, compute_t<T>* mean, compute_t<T>* rstd) {
  using C = compute_t<T>;
  const int64_t N = g.cols;
  parallel_for(g.rows, row_grain(N), [&](int64_t begin, int64_t end) {
    std::vector<C> xs(static_cast<size_t>(N)), ds(std::is_same_v<D, C> ? 0 : static_cast<size_t>(N)),
        out(static_cast<size_t>(N));
    for (int64_t r = begin; r < end; ++r) {
      // The sum as add computes it (both widened to C, one rounding to T), then normalized as stored.
      to_compute(x + r * N, xs.data(), N);
      const C* dr = nullptr;
      if constexpr (std::is_same_v<D, C>) {
        dr = delta + r * N;  // read in place
      } else {
        convert(delta + r * N, ds.data(), N);
        dr = ds.data();
      }
      for (int64_t j = 0; j < N; ++j) xs[j] += dr[j];
      if constexpr (std::is_same_v<T, C>) {
        std::copy(xs.begin(), xs.end(), sum + r * N);
      } else {
        convert(xs.data(), sum + r * N, N);
        convert(sum + r * N, xs.data(), N);
      }
      normalize_row<C>(xs.data(), N, w, b, g.eps, out.data(), mean[r], rstd[r]);
      from_compute(out.data(), y + r * N, N);
    }
  });
}

template <typename T>
void layer_norm_backward(const LayerNormGeometry& g, const T* dy, const T* x, const compute_t<T>* mean,
                         const compute_t<T>* rstd, const compute_t<T>* w, T* dx, compute_t<T>* dw, compute_t<T>* db) {
  using C = compute_t<T>;
  const int64_t N = g.cols;
  // Blocks of rows whose dw/db partial sums are kept apart and added in order afterwards.
  const int64_t block = std::max<int64_t>(16, (g.rows + 255) / 256);
  const int64_t blocks = (g.rows + block - 1) / block;
  const bool need_params = dw || db;
  std::vector<C> partial(need_params ? static_cast<size_t>(blocks * 2 * N) : 0, C(0));
  parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> x_store, dy_store, out(static_cast<size_t>(N));
    for (int64_t blk = begin; blk < end; ++blk) {
      C* pw = need_params ? partial.data() + blk * 2 * N : nullptr;
      for (int64_t r = blk * block; r < std::min(g.rows, (blk + 1) * block); ++r) {
        const C* xr = compute_view(x + r * N, N, x_store);
        const C* dyr = compute_view(dy + r * N, N, dy_store);
        const C mu = mean[r], rs = rstd[r];
        if (pw) {
          for (int64_t j = 0; j < N; ++j) {
            pw[j] += dyr[j] * (xr[j] - mu) * rs;
            pw[N + j] += dyr[j];
          }
        }
        if (!dx) continue;
        // Sums of dy*w and dy*w*xhat over the row.
        const C sum_g = lane_sum<C>(N, [&](int64_t j) { return w ? dyr[j] * w[j] : dyr[j]; });
        const C sum_gx = lane_sum<C>(N, [&](int64_t j) { return (w ? dyr[j] * w[j] : dyr[j]) * (xr[j] - mu) * rs; });
        const C mg = sum_g / static_cast<C>(N), mgx = sum_gx / static_cast<C>(N);
        for (int64_t j = 0; j < N; ++j) {
          const C gw = w ? dyr[j] * w[j] : dyr[j];
          out[j] = rs * (gw - mg - (xr[j] - mu) * rs * mgx);
        }
        from_compute(out.data(), dx + r * N, N);
      }
    }
  });
  if (!need_params) return;
  for (int64_t j = 0; j < N; ++j) {
    C sw = 0, sb = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sw += partial[blk * 2 * N + j];
      sb += partial[blk * 2 * N + N + j];
    }
    if (dw) dw[j] = sw;
    if (db) db[j] = sb;
  }
}

template <typename T>
void batch_norm_stats(const BatchNormGeometry& g, const T* x, compute_t<T>* mean, compute_t<T>* var) {
  using C = compute_t<T>;
  const int64_t S = g.spatial, M = g.count();
  parallel_for(g.channels, 1, [&](int64_t begin, int64_t end) {
    ChannelRows<T> rows(g, x);
    for (int64_t c = begin; c < end; ++c) {
      rows.load(c);
      // Each [n, c] row of S values is summed in vector lanes; the rows' sums add up in order.
      C s = 0;
      for (int64_t i = 0; i < g.n; ++i) {
        const C* p = rows.row(i);
        s += lane_sum<C>(S, [&](int64_t k) { return p[k]; });
      }
      const C mu = s / static_cast<C>(M);
      C ss = 0;
      for (int64_t i = 0; i < g.n; ++i) {
        const C* p = rows.row(i);
        ss += lane_sum<C>(S, [&](int64_t k) { return (p[k] - mu) * (p[k] - mu); });
      }
      mean[c] = mu;
      var[c] = ss / static_cast<C>(M);
    }
  });
}

template <typename T>
void batch_norm_apply(const BatchNormGeometry& g, const T* x, const compute_t<T>* mean, const compute_t<T>* invstd,
                      const compute_t<T>* w, const compute_t<T>* b, T* y) {
  using C = compute_t<T>;
  const int64_t S = g.spatial;
  // Parallel over (sample, channel) rows of S elements.
  parallel_for(g.n * g.channels, std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)),
               [&](int64_t begin, int64_t end) {
                 if constexpr (std::is_same_v<T, C>) {
                   for (int64_t row = begin; row < end; ++row) {
                     const int64_t c = row % g.channels;
                     const C mu = mean[c], is = invstd[c], wc = w ? w[c] : C(1), bc = b ? b[c] : C(0);
                     const T* p = x + row * S;
                     T* q = y + row * S;
                     for (int64_t k = 0; k < S; ++k) q[k] = (p[k] - mu) * is * wc + bc;
                   }
                 } else {
                   // 16-bit: blocks of whole rows widened in one call, computed in fp32, rounded once in one call.
                   const int64_t rows_per_block = std::max<int64_t>(1, 4096 / std::max<int64_t>(S, 1));
                   std::vector<C> in, out;
                   for (int64_t r0 = begin; r0 < end; r0 += rows_per_block) {
                     const int64_t r1 = std::min(end, r0 + rows_per_block), count = (r1 - r0) * S;
                     const C* p = compute_view(x + r0 * S, count, in);
                     out.resize(static_cast<size_t>(count));
                     for (int64_t row = r0; row < r1; ++row) {
                       const int64_t c = row % g.channels;
                       const C mu = mean[c], is = invstd[c], wc = w ? w[c] : C(1), bc = b ? b[c] : C(0);
                       const C* pr = p + (row - r0) * S;
                       C* q = out.data() + (row - r0) * S;
                       for (int64_t k = 0; k < S; ++k) q[k] = (pr[k] - mu) * is * wc + bc;
                     }
                     from_compute(out.data(), y + r0 * S, count);
                   }
                 }
               });
}

template <typename T>
void batch_norm_backward(const BatchNormGeometry& g, BatchStats stats, const T* dy, const T* x,
                         const compute_t<T>* mean, const compute_t<T>* invstd, const compute_t<T>* w, T* dx,
                         compute_t<T>* dw, compute_t<T>* db) {
  using C = compute_t<T>;
  const int64_t S = g.spatial, M = g.count();
  parallel_for(g.channels, 1, [&](int64_t begin, int64_t end) {
    ChannelRows<T> xs(g, x), dys(g, dy);
    std::vector<C> out_store;
    for (int64_t c = begin; c < end; ++c) {
      const C mu = mean[c], is = invstd[c], wc = w ? w[c] : C(1);
      xs.load(c);
      dys.load(c);
      C sum_dy = 0, sum_dy_xhat = 0;  // row sums in vector lanes, added up in row order
      for (int64_t i = 0; i < g.n; ++i) {
        const C* d = dys.row(i);
        const C* xr = xs.row(i);
        sum_dy += lane_sum<C>(S, [&](int64_t k) { return d[k]; });
        sum_dy_xhat += lane_sum<C>(S, [&](int64_t k) { return d[k] * (xr[k] - mu) * is; });
      }
      if (dw) dw[c] = sum_dy_xhat;
      if (db) db[c] = sum_dy;
      if (!dx) continue;
      const C scale = wc * is;
      const C mean_dy = stats == BatchStats::kFromBatch ? sum_dy / static_cast<C>(M) : C(0);
      const C mean_dy_xhat = stats == BatchStats::kFromBatch ? sum_dy_xhat / static_cast<C>(M) : C(0);
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t off = (i * g.channels + c) * S;
        const C* d = dys.row(i);
        const C* xr = xs.row(i);
        // f32/f64 write dx directly; 16-bit rows are computed in fp32 and rounded once, in one block.
        C* out;
        if constexpr (std::is_same_v<T, C>) {
          out = dx + off;
        } else {
          out_store.resize(static_cast<size_t>(S));
          out = out_store.data();
        }
        for (int64_t k = 0; k < S; ++k) {
          const C xhat = (xr[k] - mu) * is;
          out[k] = scale * (d[k] - mean_dy - xhat * mean_dy_xhat);
        }
        if constexpr (!std::is_same_v<T, C>) from_compute(out, dx + off, S);
      }
    }
  });
}

// ---- batch_norm + relu + 2x2 max pool ----

// One plane's normalized values from its already widened input xc, as batch_norm_apply computes and rounds
// them (for 16-bit T: to T, then back to C).
template <typename T>
void normalize_plane(const compute_t<T>* xc, int64_t n, compute_t<T> mu, compute_t<T> is, compute_t<T> wc,
                     compute_t<T> bc, compute_t<T>* y, std::vector<T>& rounded) {
  for (int64_t k = 0; k < n; ++k) y[k] = (xc[k] - mu) * is * wc + bc;
  if constexpr (!std::is_same_v<T, compute_t<T>>) {
    rounded.resize(static_cast<size_t>(n));
    from_compute(y, rounded.data(), n);  // as batch_norm stores it
    to_compute(rounded.data(), y, n);
  }
}

template <typename T>
void batch_norm_relu_pool_forward(const BatchNormGeometry& g, int64_t h, int64_t w, const T* x,
                                  const compute_t<T>* mean, const compute_t<T>* invstd, const compute_t<T>* weight,
                                  const compute_t<T>* bias, T* out, uint8_t* winner, T* winner_x) {
  using C = compute_t<T>;
  const int64_t oh = h / 2, ow = w / 2;
  parallel_for(g.n * g.channels, std::max<int64_t>(1, 16384 / std::max<int64_t>(h * w, 1)),
               [&](int64_t begin, int64_t end) {
                 std::vector<C> y(static_cast<size_t>(h * w)), x_store, o_store, wx_store;
                 std::vector<T> rounded;
                 if constexpr (!std::is_same_v<T, C>) {
                   o_store.resize(static_cast<size_t>(oh * ow));
                   wx_store.resize(o_store.size());
                 }
                 for (int64_t plane = begin; plane < end; ++plane) {
                   const int64_t c = plane % g.channels;
                   const C mu = mean[c], is = invstd[c], wc = weight ? weight[c] : C(1), bc = bias ? bias[c] : C(0);
                   const T* xp = x + plane * h * w;
                   const C* xc = compute_view(xp, h * w, x_store);  // widened once, for both uses
                   normalize_plane<T>(xc, h * w, mu, is, wc, bc, y.data(), rounded);
                   const int64_t o0 = plane * oh * ow;
                   C* o = o_store.data();
                   C* wx = wx_store.data();
                   if constexpr (std::is_same_v<T, C>) {
                     o = out + o0;
                     wx = winner_x + o0;
                   }
                   // max_pool2d's selection on the normalized rows, relu, the winner's position and raw input.
                   for (int64_t oy = 0; oy < oh; ++oy) {
                     const int64_t r = 2 * oy * w;
                     max_pool_relu_row<C>(y.data() + r, y.data() + r + w, xc + r, xc + r + w, ow, o + oy * ow,
                                          winner + o0 + oy * ow, wx + oy * ow);
                   }
                   if constexpr (!std::is_same_v<T, C>) {
                     from_compute(o, out + o0, oh * ow);
                     from_compute(wx, winner_x + o0, oh * ow);  // exact: the values came from T
                   }
                 }
               });
}

template <typename T>
void batch_norm_relu_pool_backward(const BatchNormGeometry& g, BatchStats stats, int64_t h, int64_t w, const T* dout,
                                   const uint8_t* winner, const T* winner_x, const T* x, const compute_t<T>* mean,
                                   const compute_t<T>* invstd, const compute_t<T>* weight, T* dx, compute_t<T>* dw,
                                   compute_t<T>* db) {
  using C = compute_t<T>;
  const int64_t oh = h / 2, ow = w / 2, M = g.count(), pooled = oh * ow;
  std::vector<C> sum_dy(static_cast<size_t>(g.channels)), sum_dy_xhat(sum_dy.size());
  // Pass 1, per channel: sums over the live winners only (everywhere else the batch norm's dy is 0), from
  // the pooled-size dout, winner and winner_x alone.
  parallel_for(g.channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const C mu = mean[c], is = invstd[c];
      C s_dy = 0, s_dy_xhat = 0;
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t at = (i * g.channels + c) * pooled;
        const T* d = dout + at;
        const T* xw = winner_x + at;
        const uint8_t* win = winner + at;
        const auto live = [&](int64_t o) { return win[o] == kDeadWindow ? C(0) : static_cast<C>(d[o]); };
        s_dy += lane_sum<C>(pooled, live);
        s_dy_xhat += lane_sum<C>(pooled, [&](int64_t o) { return live(o) * (static_cast<C>(xw[o]) - mu) * is; });
      }
      sum_dy[c] = s_dy;
      sum_dy_xhat[c] = s_dy_xhat;
      if (dw) dw[c] = s_dy_xhat;
      if (db) db[c] = s_dy;
    }
  });
  if (!dx) return;
  // Pass 2, per plane: dx = scale (dy - mean(dy) - xhat mean(dy xhat)), dy added at the winners.
  const bool from_batch = stats == BatchStats::kFromBatch;
  parallel_for(g.n * g.channels, std::max<int64_t>(1, 16384 / std::max<int64_t>(h * w, 1)),
               [&](int64_t begin, int64_t end) {
                 std::vector<C> x_store, dx_store(std::is_same_v<T, C> ? 0 : static_cast<size_t>(h * w));
                 for (int64_t plane = begin; plane < end; ++plane) {
                   const int64_t c = plane % g.channels;
                   const C mu = mean[c], is = invstd[c], wc = weight ? weight[c] : C(1), scale = wc * is;
                   const C mean_dy = from_batch ? sum_dy[c] / static_cast<C>(M) : C(0);
                   const C mean_dy_xhat = from_batch ? sum_dy_xhat[c] / static_cast<C>(M) : C(0);
                   const C* xp = compute_view(x + plane * h * w, h * w, x_store);
                   C* out = dx_store.data();
                   if constexpr (std::is_same_v<T, C>) out = dx + plane * h * w;
                   // The composed formula, scale (dy - mean_dy - xhat mean_dy_xhat), with dy = 0 ...
                   for (int64_t k = 0; k < h * w; ++k)
                     out[k] = scale * (C(0) - mean_dy - (xp[k] - mu) * is * mean_dy_xhat);
                   // ... then again at the live winners with their dy.
                   const uint8_t* win = winner + plane * pooled;
                   const T* dp = dout + plane * pooled;
                   for (int64_t oy = 0; oy < oh; ++oy) {
                     for (int64_t ox = 0; ox < ow; ++ox) {
                       const uint8_t q = win[oy * ow + ox];
                       if (q == kDeadWindow) continue;
                       const int64_t k = (2 * oy + (q >> 1)) * w + 2 * ox + (q & 1);
                       out[k] = scale * (static_cast<C>(dp[oy * ow + ox]) - mean_dy - (xp[k] - mu) * is * mean_dy_xhat);
                     }
                   }
                   if constexpr (!std::is_same_v<T, C>) from_compute(out, dx + plane * h * w, h * w);
                 }
               });
}

#define MT_NORM_INSTANTIATE_(T)                                                                                       \
  template void layer_norm_forward<T>(const LayerNormGeometry&, const T*, const compute_t<T>*, const compute_t<T>*,   \
                                      T*, compute_t<T>*, compute_t<T>*);                                              \
  template void layer_norm_backward<T>(const LayerNormGeometry&, const T*, const T*, const compute_t<T>*,             \
                                       const compute_t<T>*, const compute_t<T>*, T*, compute_t<T>*, compute_t<T>*);   \
  template void batch_norm_stats<T>(const BatchNormGeometry&, const T*, compute_t<T>*, compute_t<T>*);                \
  template void batch_norm_apply<T>(const BatchNormGeometry&, const T*, const compute_t<T>*, const compute_t<T>*,     \
                                    const compute_t<T>*, const compute_t<T>*, T*);                                    \
  template void batch_norm_backward<T>(const BatchNormGeometry&, BatchStats, const T*, const T*, const compute_t<T>*, \
                                       const compute_t<T>*, const compute_t<T>*, T*, compute_t<T>*, compute_t<T>*);   \
  template void batch_norm_relu_pool_forward<T>(const BatchNormGeometry&, int64_t, int64_t, const T*,                 \
                                                const compute_t<T>*, const compute_t<T>*, const compute_t<T>*,        \
                                                const compute_t<T>*, T*, uint8_t*, T*);                               \
  template void batch_norm_relu_pool_backward<T>(                                                                     \
      const BatchNormGeometry&, BatchStats, int64_t, int64_t, const T*, const uint8_t*, const T*, const T*,           \
      const compute_t<T>*, const compute_t<T>*, const compute_t<T>*, T*, compute_t<T>*, compute_t<T>*)
MT_NORM_INSTANTIATE_(float);
MT_NORM_INSTANTIATE_(double);
MT_NORM_INSTANTIATE_(Half);
MT_NORM_INSTANTIATE_(BFloat16);
#undef MT_NORM_INSTANTIATE_

#define MT_ADD_NORM_INSTANTIATE_(T, D)                                                                          \
  template void add_layer_norm_forward<T, D>(const LayerNormGeometry&, const T*, const D*, const compute_t<T>*, \
                                             const compute_t<T>*, T*, T*, compute_t<T>*, compute_t<T>*)
MT_ADD_NORM_INSTANTIATE_(float, float);
MT_ADD_NORM_INSTANTIATE_(float, Half);
MT_ADD_NORM_INSTANTIATE_(float, BFloat16);
MT_ADD_NORM_INSTANTIATE_(double, double);
MT_ADD_NORM_INSTANTIATE_(Half, Half);
MT_ADD_NORM_INSTANTIATE_(BFloat16, BFloat16);
#undef MT_ADD_NORM_INSTANTIATE_

}  // namespace mantissa::cpu
