// max / avg pooling, forward and backward, in parallel over (sample, channel) planes. 16-bit values
// compute in fp32: max is exact anyway; sums are kept in fp32 and rounded once per output.
#include "ops/pool/pool_cpu.h"

#include <algorithm>
#include <cmath>
#include <immintrin.h>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/convert.h"
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

// The same row with AVX-512, 16 outputs per step (masked at the row's end: these rows are short, 13 and
// 5 outputs in the CNN, where the portable loop above runs mostly as its scalar remainder). Candidates
// are deinterleaved with two-source permutes; `which` (0..3) names the window position that won.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's unmasked intrinsics (a false positive)

// Outputs [ox, ox + 16) of a 2x2 window row pair, the part both AVX-512 row kernels share: the four window
// positions deinterleaved (row r0's even and odd columns, then r1's), masked at the row's end.
struct Windows16 {
  __mmask16 out_mask;
  __m512 v[4];
};
__attribute__((target("avx512f"), always_inline)) inline Windows16 windows_2x2(const float* r0, const float* r1,
                                                                               int64_t ox, int64_t ow) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const int64_t m = std::min<int64_t>(16, ow - ox);
  const __mmask16 lo = static_cast<__mmask16>(m >= 8 ? 0xffff : (1u << (2 * m)) - 1);
  const __mmask16 hi = static_cast<__mmask16>(m <= 8 ? 0 : (1u << (2 * (m - 8))) - 1);
  const __m512 t0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ox), t1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ox + 16);
  const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ox), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ox + 16);
  return {static_cast<__mmask16>((1u << m) - 1),
          {_mm512_permutex2var_ps(t0, even, t1), _mm512_permutex2var_ps(t0, odd, t1),
           _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)}};
}

// max_pool2d's selection over the four positions, in its visiting order (greater or NaN replaces): the
// maximum, the winning position (0..3) and, for each later position, the lanes it took.
struct Selected16 {
  __m512 best;
  __m512i which;
  __mmask16 take[3];
};
__attribute__((target("avx512f"), always_inline)) inline Selected16 select_2x2(const Windows16& w) {
  Selected16 s{w.v[0], _mm512_setzero_si512(), {}};
  for (int k = 0; k < 3; ++k) {
    const __m512 c = w.v[k + 1];
    s.take[k] = _mm512_cmp_ps_mask(c, s.best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    s.best = _mm512_mask_mov_ps(s.best, s.take[k], c);
    s.which = _mm512_mask_mov_epi32(s.which, s.take[k], _mm512_set1_epi32(k + 1));
  }
  return s;
}

__attribute__((target("avx512f"))) void max_pool_row_2x2_avx512(const float* r0, const float* r1, int64_t ow,
                                                                int64_t i0, int64_t i1, float* out, int64_t* idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t ox = 0; ox < ow; ox += 16) {
    const Windows16 w = windows_2x2(r0, r1, ox, ow);
    const Selected16 s = select_2x2(w);
    const __mmask16 out_mask = w.out_mask;
    const __m512i which = s.which;
    _mm512_mask_storeu_ps(out + ox, out_mask, s.best);
    // index = (which < 2 ? i0 : i1) + 2 * (ox + lane) + (which & 1)
    const __m512i lane2 = _mm512_add_epi32(even, _mm512_set1_epi32(static_cast<int>(2 * ox)));
    const __m512i col = _mm512_add_epi32(lane2, _mm512_and_si512(which, _mm512_set1_epi32(1)));
    const __mmask16 bottom = _mm512_cmpge_epi32_mask(which, _mm512_set1_epi32(2));
    const __m512i lo64 = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(col));
    const __m512i hi64 = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(col, 1));
    const __m512i base0 = _mm512_set1_epi64(i0), base1 = _mm512_set1_epi64(i1);
    const __m512i blo = _mm512_mask_mov_epi64(base0, static_cast<__mmask8>(bottom), base1);
    const __m512i bhi = _mm512_mask_mov_epi64(base0, static_cast<__mmask8>(bottom >> 8), base1);
    _mm512_mask_storeu_epi64(idx + ox, static_cast<__mmask8>(out_mask), _mm512_add_epi64(blo, lo64));
    _mm512_mask_storeu_epi64(idx + ox + 8, static_cast<__mmask8>(out_mask >> 8), _mm512_add_epi64(bhi, hi64));
  }
}
#pragma GCC diagnostic pop

// The fused batch-norm tail's row (max_pool_relu_row below): the same selection as max_pool_row_2x2 on the
// normalized rows y0, y1, applied also to the raw input rows x0, x1 (the winner's own input value), then
// relu; win is the window position 0..3 or kDeadWindow where relu gave 0.
template <typename C>
void max_pool_relu_row_portable(const C* __restrict y0, const C* __restrict y1, const C* __restrict x0,
                                const C* __restrict x1, int64_t ow, C* __restrict out, uint8_t* __restrict win,
                                C* __restrict wx) {
  for (int64_t ox = 0; ox < ow; ++ox) {
    C best = y0[2 * ox], bx = x0[2 * ox];
    int which = 0;
    const C cand[3] = {y0[2 * ox + 1], y1[2 * ox], y1[2 * ox + 1]};
    const C xc[3] = {x0[2 * ox + 1], x1[2 * ox], x1[2 * ox + 1]};
    for (int k = 0; k < 3; ++k) {
      const bool take = (cand[k] > best) | (cand[k] != cand[k]);
      best = take ? cand[k] : best;
      bx = take ? xc[k] : bx;
      which = take ? k + 1 : which;
    }
    const bool live = best > C(0) || best != best;
    out[ox] = live ? best : C(0);
    win[ox] = live ? static_cast<uint8_t>(which) : kDeadWindow;
    wx[ox] = bx;
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's unmasked intrinsics (a false positive)
__attribute__((target("avx512f,avx512bw,avx512vl"))) void max_pool_relu_row_avx512(const float* y0, const float* y1,
                                                                                   const float* x0, const float* x1,
                                                                                   int64_t ow, float* out, uint8_t* win,
                                                                                   float* wx) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ox = 0; ox < ow; ox += 16) {
    const Windows16 y = windows_2x2(y0, y1, ox, ow), x = windows_2x2(x0, x1, ox, ow);
    const Selected16 s = select_2x2(y);
    __m512 bx = x.v[0];  // the raw input at the winner: the same lanes taken
    for (int k = 0; k < 3; ++k) bx = _mm512_mask_mov_ps(bx, s.take[k], x.v[k + 1]);
    const __mmask16 live =
        _mm512_cmp_ps_mask(s.best, zero, _CMP_GT_OQ) | _mm512_cmp_ps_mask(s.best, s.best, _CMP_UNORD_Q);
    _mm512_mask_storeu_ps(out + ox, y.out_mask, _mm512_maskz_mov_ps(live, s.best));
    const __m512i code = _mm512_mask_mov_epi32(_mm512_set1_epi32(kDeadWindow), live, s.which);
    _mm_mask_storeu_epi8(win + ox, y.out_mask, _mm512_cvtepi32_epi8(code));
    _mm512_mask_storeu_ps(wx + ox, y.out_mask, bx);
  }
}
#pragma GCC diagnostic pop

// The row kernel for float rows: AVX-512 where the CPU has it.
using FloatRowKernel = void (*)(const float*, const float*, int64_t, int64_t, int64_t, float*, int64_t*);
FloatRowKernel float_row_kernel() {
  static const FloatRowKernel k = convert_isa() == ConvertIsa::kAvx512
                                      ? max_pool_row_2x2_avx512
                                      : static_cast<FloatRowKernel>(&max_pool_row_2x2<float>);
  return k;
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
      max_pool_row<C>(r0, r0 + g.w, g.ow, i0, i0 + g.w, yp + oy * g.ow, idx);
    } else {
      max_pool_row<C>(r0, r0 + g.w, g.ow, i0, i0 + g.w, out.data(), idx);
      for (int64_t ox = 0; ox < g.ow; ++ox) yp[oy * g.ow + ox] = xp[idx[ox]];  // the stored value itself
    }
  }
}

bool is_2x2_stride_2(const Pool2dGeometry& g) {
  return g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0;
}

}  // namespace

template <typename C>
void max_pool_row(const C* r0, const C* r1, int64_t ow, int64_t i0, int64_t i1, C* out, int64_t* idx) {
  if constexpr (std::is_same_v<C, float>) {
    float_row_kernel()(r0, r1, ow, i0, i1, out, idx);
  } else {
    max_pool_row_2x2<C>(r0, r1, ow, i0, i1, out, idx);
  }
}
template void max_pool_row<float>(const float*, const float*, int64_t, int64_t, int64_t, float*, int64_t*);

template <typename C>
void max_pool_relu_row(const C* y0, const C* y1, const C* x0, const C* x1, int64_t ow, C* out, uint8_t* win, C* wx) {
  if constexpr (std::is_same_v<C, float>) {
    static const bool avx512 = convert_isa() == ConvertIsa::kAvx512 && __builtin_cpu_supports("avx512vl");
    if (avx512) return max_pool_relu_row_avx512(y0, y1, x0, x1, ow, out, win, wx);
  }
  max_pool_relu_row_portable(y0, y1, x0, x1, ow, out, win, wx);
}
template void max_pool_relu_row<float>(const float*, const float*, const float*, const float*, int64_t, float*,
                                       uint8_t*, float*);
template void max_pool_relu_row<double>(const double*, const double*, const double*, const double*, int64_t, double*,
                                        uint8_t*, double*);
template void max_pool_row<double>(const double*, const double*, int64_t, int64_t, int64_t, double*, int64_t*);

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

#define MT_POOL_INSTANTIATE_(T)                                                              \
  template void max_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*, int64_t*);        \
  template void max_pool2d_backward<T>(const Pool2dGeometry&, const T*, const int64_t*, T*); \
  template void avg_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*);                  \
  template void avg_pool2d_backward<T>(const Pool2dGeometry&, const T*, T*)
MT_POOL_INSTANTIATE_(float);
MT_POOL_INSTANTIATE_(double);
MT_POOL_INSTANTIATE_(Half);
MT_POOL_INSTANTIATE_(BFloat16);
#undef MT_POOL_INSTANTIATE_

}  // namespace mantissa::cpu
