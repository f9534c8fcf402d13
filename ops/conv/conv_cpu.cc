// im2col / col2im for conv2d. Rows of the column matrix are (input channel, kernel row, kernel col);
// columns are output pixels. Rows are independent, so both run in parallel over rows (im2col) or
// over input channels (col2im, whose rows for one channel add into the same plane).
#include "ops/conv/conv_cpu.h"

#include <algorithm>

#include "framework/parallel.h"

namespace mantissa::cpu {
namespace {

// The output columns [lo, hi) whose input column ox*stride - pad + offset lies inside [0, size).
struct ValidRange {
  int64_t lo, hi;
};
ValidRange valid_outputs(int64_t out_size, int64_t in_size, int64_t stride, int64_t offset) {
  // in = ox*stride + offset, need 0 <= in < in_size.
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = in_size - offset <= 0 ? 0 : (in_size - offset - 1) / stride + 1;
  lo = std::min(lo, out_size);
  hi = std::clamp(hi, lo, out_size);
  return {lo, hi};
}

constexpr int64_t kRowGrain = 8;  // rows of OH*OW pixels each; a handful per thread pays for the fork

}  // namespace

template <typename T, typename U>
void im2col(const T* x, const Conv2dGeometry& g, int64_t channels, U* col, int64_t ld) {
  const int64_t rows = channels * g.kh * g.kw;
  parallel_for(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t kj = r % g.kw, ki = (r / g.kw) % g.kh, ci = r / (g.kw * g.kh);
      const T* plane = x + ci * g.h * g.w;
      U* dst = col + r * ld;
      const int64_t off_w = kj * g.dil_w - g.pad_w;
      const ValidRange vx = valid_outputs(g.ow, g.w, g.stride_w, off_w);
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        U* out = dst + oy * g.ow;
        const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
        if (iy < 0 || iy >= g.h) {
          std::fill(out, out + g.ow, U(0.0f));
          continue;
        }
        const T* src = plane + iy * g.w;  // input column of output ox: ox*stride + off_w
        std::fill(out, out + vx.lo, U(0.0f));
        if (g.stride_w == 1) {
          for (int64_t ox = vx.lo; ox < vx.hi; ++ox) out[ox] = static_cast<U>(src[ox + off_w]);
        } else {
          for (int64_t ox = vx.lo; ox < vx.hi; ++ox) out[ox] = static_cast<U>(src[ox * g.stride_w + off_w]);
        }
        std::fill(out + vx.hi, out + g.ow, U(0.0f));
      }
    }
  });
}

template <typename A>
void col2im(const A* col, const Conv2dGeometry& g, int64_t channels, A* x) {
  const int64_t ld = g.out_plane();
  parallel_for(channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ci = begin; ci < end; ++ci) {
      A* plane = x + ci * g.h * g.w;
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          const A* src = col + ((ci * g.kh + ki) * g.kw + kj) * ld;
          const int64_t off_w = kj * g.dil_w - g.pad_w;
          const ValidRange vx = valid_outputs(g.ow, g.w, g.stride_w, off_w);
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            const int64_t iy = oy * g.stride_h - g.pad_h + ki * g.dil_h;
            if (iy < 0 || iy >= g.h) continue;
            A* dst = plane + iy * g.w;
            const A* row = src + oy * g.ow;
            for (int64_t ox = vx.lo; ox < vx.hi; ++ox) dst[ox * g.stride_w + off_w] += row[ox];
          }
        }
      }
    }
  });
}

template void im2col<float, float>(const float*, const Conv2dGeometry&, int64_t, float*, int64_t);
template void im2col<double, double>(const double*, const Conv2dGeometry&, int64_t, double*, int64_t);
template void im2col<Half, Half>(const Half*, const Conv2dGeometry&, int64_t, Half*, int64_t);
template void im2col<BFloat16, BFloat16>(const BFloat16*, const Conv2dGeometry&, int64_t, BFloat16*, int64_t);
template void im2col<Half, float>(const Half*, const Conv2dGeometry&, int64_t, float*, int64_t);
template void im2col<BFloat16, float>(const BFloat16*, const Conv2dGeometry&, int64_t, float*, int64_t);
template void col2im<float>(const float*, const Conv2dGeometry&, int64_t, float*);
template void col2im<double>(const double*, const Conv2dGeometry&, int64_t, double*);

}  // namespace mantissa::cpu
