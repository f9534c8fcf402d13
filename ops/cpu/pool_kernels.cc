// max / avg pooling, forward and backward, in parallel over (sample, channel) planes. 16-bit values
// compute in fp32: max is exact anyway; sums are kept in fp32 and rounded once per output.
#include "ops/cpu/pool_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/parallel.h"
#include "ops/cpu/compute_buffer.h"

namespace mantissa::cpu {
namespace {

// The window of output (oy, ox), clipped to the input: rows [y0, y1), cols [x0, x1).
struct Window {
  int64_t y0, y1, x0, x1;
};
Window window(const Pool2dGeometry& g, int64_t oy, int64_t ox) {
  const int64_t ys = oy * g.stride_h - g.pad_h, xs = ox * g.stride_w - g.pad_w;
  return {std::max<int64_t>(ys, 0), std::min(ys + g.kh, g.h), std::max<int64_t>(xs, 0), std::min(xs + g.kw, g.w)};
}

int64_t plane_grain(const Pool2dGeometry& g) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(g.h * g.w, 1)); }

// One output row of the 2x2, stride 2, unpadded max pool from input rows r0 and r1 (compute type; the
// input indices of their first elements are i0 and i1). The four values of a window are visited in the
// generic loop's order (row by row); a value replaces the running maximum when greater or NaN (as
// PyTorch). Written with selects and no short-circuit so that it vectorizes: maxima are data-dependent
// coin flips for a branch predictor.
template <typename C>
void max_pool_row_2x2(const C* __restrict r0, const C* __restrict r1, int64_t ow, int64_t i0, int64_t i1,
                      C* __restrict out, int64_t* __restrict idx) {
  for (int64_t ox = 0; ox < ow; ++ox) {
    C best = r0[2 * ox];  // the generic loop's first step, from -inf, gives the same value and index
    int64_t bi = i0 + 2 * ox;
    C v = r0[2 * ox + 1];
    bool take = (v > best) | (v != v);
    best = take ? v : best;
    bi = take ? i0 + 2 * ox + 1 : bi;
    v = r1[2 * ox];
    take = (v > best) | (v != v);
    best = take ? v : best;
    bi = take ? i1 + 2 * ox : bi;
    v = r1[2 * ox + 1];
    take = (v > best) | (v != v);
    best = take ? v : best;
    bi = take ? i1 + 2 * ox + 1 : bi;
    out[ox] = best;
    idx[ox] = bi;
  }
}

template <typename T>
void max_pool2d_2x2(const Pool2dGeometry& g, const T* xp, T* yp, int64_t* ip, std::vector<compute_t<T>>& plane,
                    std::vector<compute_t<T>>& out) {
  using C = compute_t<T>;
  if constexpr (!std::is_same_v<T, C>) out.resize(static_cast<size_t>(g.ow));
  const C* xc = compute_view(xp, g.h * g.w, plane);  // the whole plane at once: one conversion call
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    const int64_t i0 = 2 * oy * g.w;
    const C* r0 = xc + i0;  // the window's two input rows
    int64_t* idx = ip + oy * g.ow;
    if constexpr (std::is_same_v<T, C>) {
      max_pool_row_2x2<C>(r0, r0 + g.w, g.ow, i0, i0 + g.w, yp + oy * g.ow, idx);
    } else {
      max_pool_row_2x2<C>(r0, r0 + g.w, g.ow, i0, i0 + g.w, out.data(), idx);
      for (int64_t ox = 0; ox < g.ow; ++ox) yp[oy * g.ow + ox] = xp[idx[ox]];  // the stored value itself
    }
  }
}

bool is_2x2_stride_2(const Pool2dGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0;
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* argmax) {
  using C = compute_t<T>;
  if (is_2x2_stride_2(g)) {
    parallel_for(g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
      std::vector<C> rows, out;
      for (int64_t pl = begin; pl < end; ++pl) {
        max_pool2d_2x2<T>(g, x + pl * g.h * g.w, y + pl * g.oh * g.ow, argmax + pl * g.oh * g.ow, rows, out);
      }
    });
    return;
  }
  parallel_for(g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* xp = x + pl * g.h * g.w;
      T* yp = y + pl * g.oh * g.ow;
      int64_t* ip = argmax + pl * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const Window win = window(g, oy, ox);
          C best = -std::numeric_limits<C>::infinity();
          int64_t best_i = win.y0 * g.w + win.x0;
          for (int64_t iy = win.y0; iy < win.y1; ++iy) {
            for (int64_t ix = win.x0; ix < win.x1; ++ix) {
              const C v = static_cast<C>(xp[iy * g.w + ix]);
              if (v > best || std::isnan(v)) {  // as PyTorch: a NaN replaces the running maximum
                best = v;
                best_i = iy * g.w + ix;
              }
            }
          }
          yp[oy * g.ow + ox] = xp[best_i];
          ip[oy * g.ow + ox] = best_i;
        }
      }
    }
  });
}

template <typename T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* dy, const int64_t* argmax, T* dx) {
  using C = compute_t<T>;
  parallel_for(g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
    std::vector<C> store(std::is_same_v<T, C> ? 0 : static_cast<size_t>(g.h * g.w));
    for (int64_t pl = begin; pl < end; ++pl) {
      // f32/f64 accumulate in dx itself; 16-bit planes in fp32, rounded once.
      C* acc;
      if constexpr (std::is_same_v<T, C>) {
        acc = dx + pl * g.h * g.w;
      } else {
        acc = store.data();
      }
      std::fill(acc, acc + g.h * g.w, C(0));
      const T* dyp = dy + pl * g.oh * g.ow;
      const int64_t* ip = argmax + pl * g.oh * g.ow;
      for (int64_t o = 0; o < g.oh * g.ow; ++o) acc[ip[o]] += static_cast<C>(dyp[o]);
      if constexpr (!std::is_same_v<T, C>) from_compute(acc, dx + pl * g.h * g.w, g.h * g.w);
    }
  });
}

template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y) {
  using C = compute_t<T>;
  const C divisor = static_cast<C>(g.kh * g.kw);  // divided, not multiplied by 1/d, as PyTorch
  parallel_for(g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
    for (int64_t pl = begin; pl < end; ++pl) {
      const T* xp = x + pl * g.h * g.w;
      T* yp = y + pl * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const Window win = window(g, oy, ox);
          C s = 0;
          for (int64_t iy = win.y0; iy < win.y1; ++iy) {
            for (int64_t ix = win.x0; ix < win.x1; ++ix) s += static_cast<C>(xp[iy * g.w + ix]);
          }
          yp[oy * g.ow + ox] = static_cast<T>(s / divisor);
        }
      }
    }
  });
}

template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx) {
  using C = compute_t<T>;
  const C divisor = static_cast<C>(g.kh * g.kw);  // divided, not multiplied by 1/d, as PyTorch
  parallel_for(g.planes, plane_grain(g), [&](int64_t begin, int64_t end) {
    std::vector<C> acc(static_cast<size_t>(g.h * g.w));
    for (int64_t pl = begin; pl < end; ++pl) {
      std::fill(acc.begin(), acc.end(), C(0));
      const T* dyp = dy + pl * g.oh * g.ow;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const Window win = window(g, oy, ox);
          const C share = static_cast<C>(dyp[oy * g.ow + ox]) / divisor;
          for (int64_t iy = win.y0; iy < win.y1; ++iy) {
            for (int64_t ix = win.x0; ix < win.x1; ++ix) acc[iy * g.w + ix] += share;
          }
        }
      }
      from_compute(acc.data(), dx + pl * g.h * g.w, g.h * g.w);
    }
  });
}

#define MT_POOL_INSTANTIATE_(T)                                                                   \
  template void max_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*, int64_t*);            \
  template void max_pool2d_backward<T>(const Pool2dGeometry&, const T*, const int64_t*, T*);     \
  template void avg_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*);                      \
  template void avg_pool2d_backward<T>(const Pool2dGeometry&, const T*, T*)
MT_POOL_INSTANTIATE_(float);
MT_POOL_INSTANTIATE_(double);
MT_POOL_INSTANTIATE_(Half);
MT_POOL_INSTANTIATE_(BFloat16);
#undef MT_POOL_INSTANTIATE_

}  // namespace mantissa::cpu
