// Direct single-input-channel conv2d (see conv_direct.h). Each output plane is computed "full width": at
// positions q = oy * W + ox for ox < W, so that tap (ky, kx) reads x at q + ky * W + kx, one contiguous
// run per tap over the whole plane; the columns ox >= OW are computed and dropped. Accumulation is in
// f32 in tap order after the bias; 16-bit inputs are widened exactly and outputs rounded once.
#include "ops/conv/conv_direct_cpu.h"

#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <type_traits>
#include <vector>

#include "framework/parallel.h"
#include "ops/cpu/compute_buffer.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kMaxTaps = 64;
constexpr int kVectors = 8;               // AVX2 accumulators per register block (x86-64-v3 baseline)
constexpr int64_t kBlock = 8 * kVectors;  // outputs per register block

// sum over j < n of a[j] * b[j] in 32 interleaved partial sums (vectorizes; 4 independent FMA chains).
float dot(const float* a, const float* b, int64_t n) {
  float lanes[32] = {};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    for (int k = 0; k < 32; ++k) lanes[k] += a[j + k] * b[j + k];
  }
  for (; j < n; ++j) lanes[j & 31] += a[j] * b[j];
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

// dw[t] += sum over q < n of d[q] * x[q + offset[t]] for the 9 taps of a 3x3 kernel in one pass: each
// d vector is loaded once for all taps, one accumulator vector per tap.
void dot9(const float* d, const float* x, const int64_t* offset, int64_t n, float* dw) {
  __m256 acc[9];
  for (auto& a : acc) a = _mm256_setzero_ps();
  int64_t q = 0;
  for (; q + 8 <= n; q += 8) {
    const __m256 dv = _mm256_loadu_ps(d + q);
    for (int t = 0; t < 9; ++t) acc[t] = _mm256_fmadd_ps(dv, _mm256_loadu_ps(x + q + offset[t]), acc[t]);
  }
  for (int t = 0; t < 9; ++t) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[t]);
    float s = 0;
    for (float v : lanes) s += v;
    for (int64_t r = q; r < n; ++r) s += d[r] * x[r + offset[t]];
    dw[t] += s;
  }
}

float sum(const float* a, int64_t n) {
  float lanes[32] = {};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    for (int k = 0; k < 32; ++k) lanes[k] += a[j + k];
  }
  for (; j < n; ++j) lanes[j & 31] += a[j];
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

}  // namespace

bool conv2d_direct_supported(const Conv2dGeometry& g) {
  return g.c == 1 && g.groups == 1 && g.stride_h == 1 && g.stride_w == 1 && g.dil_h == 1 && g.dil_w == 1 &&
         g.pad_h == 0 && g.pad_w == 0 && g.kh * g.kw <= kMaxTaps && g.oh > 0 && g.ow > 0 && g.n > 0;
}

template <typename T>
void conv2d_direct_forward(const Conv2dGeometry& g, const T* x, const T* w, const float* bias, T* y) {
  const int64_t W = g.w, HW = g.h * g.w, P = g.oh * g.ow, taps = g.kh * g.kw;
  const int64_t span = (g.oh - 1) * W + g.ow;  // full-width positions up to the last real output
  std::vector<float> wf(static_cast<size_t>(g.o * taps));
  to_compute(w, wf.data(), g.o * taps);
  int64_t offset[kMaxTaps];
  for (int64_t t = 0; t < taps; ++t) offset[t] = (t / g.kw) * W + t % g.kw;
  parallel_for(g.n, 1, [&](int64_t begin, int64_t end) {
    // The plane in f32 with kBlock zeros after it, so that the last block runs whole (its extra outputs,
    // beyond `span`, are dropped).
    std::vector<float> xs(static_cast<size_t>(HW + kBlock), 0.0f), acc(static_cast<size_t>(span + kBlock));
    std::vector<float> out(static_cast<size_t>(P));
    for (int64_t n = begin; n < end; ++n) {
      to_compute(x + n * HW, xs.data(), HW);
      const float* xp = xs.data();
      for (int64_t o = 0; o < g.o; ++o) {
        const float b = bias ? bias[o] : 0.0f;
        const float* wo = wf.data() + o * taps;
        // Blocks of kBlock outputs kept in registers across the taps. Real outputs read inside the plane:
        // the last position span - 1 plus the largest offset (KH-1) * W + KW-1 is H * W - 1.
        for (int64_t q0 = 0; q0 < span; q0 += kBlock) {
          __m256 a[kVectors];
          for (int v = 0; v < kVectors; ++v) a[v] = _mm256_set1_ps(b);
          for (int64_t t = 0; t < taps; ++t) {
            const __m256 wv = _mm256_set1_ps(wo[t]);
            const float* xt = xp + q0 + offset[t];
            for (int v = 0; v < kVectors; ++v) a[v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xt + 8 * v), a[v]);
          }
          for (int v = 0; v < kVectors; ++v) _mm256_storeu_ps(acc.data() + q0 + 8 * v, a[v]);
        }
        // Drop the columns ox >= OW.
        T* yp = y + (n * g.o + o) * P;
        if constexpr (std::is_same_v<T, float>) {
          for (int64_t oy = 0; oy < g.oh; ++oy) std::memcpy(yp + oy * g.ow, acc.data() + oy * W, g.ow * sizeof(float));
        } else {
          for (int64_t oy = 0; oy < g.oh; ++oy)
            std::memcpy(out.data() + oy * g.ow, acc.data() + oy * W, g.ow * sizeof(float));
          from_compute(out.data(), yp, P);
        }
      }
    }
  });
}

template <typename T>
void conv2d_direct_backward_weights(const Conv2dGeometry& g, const T* x, const T* dy, float* dw, float* db) {
  const int64_t W = g.w, HW = g.h * g.w, P = g.oh * g.ow, taps = g.kh * g.kw;
  const int64_t span = (g.oh - 1) * W + g.ow;
  int64_t offset[kMaxTaps];
  for (int64_t t = 0; t < taps; ++t) offset[t] = (t / g.kw) * W + t % g.kw;
  // 16-bit input: the whole batch widened once (N * H * W values), shared by every output channel.
  std::vector<float> xall;
  const float* xf = compute_view(x, g.n * HW, xall);
  parallel_for(g.o, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> dys, dyf(static_cast<size_t>(span), 0.0f);
    for (int64_t o = begin; o < end; ++o) {
      float dwo[kMaxTaps] = {};
      float dbo = 0;
      for (int64_t n = 0; n < g.n; ++n) {
        const float* d = compute_view(dy + (n * g.o + o) * P, P, dys);
        // dy spread to full width; the columns ox >= OW stay zero.
        for (int64_t oy = 0; oy < g.oh; ++oy) std::memcpy(dyf.data() + oy * W, d + oy * g.ow, g.ow * sizeof(float));
        dbo += sum(d, P);
        const float* xp = xf + n * HW;
        if (taps == 9) {
          dot9(dyf.data(), xp, offset, span, dwo);
        } else {
          for (int64_t t = 0; t < taps; ++t) dwo[t] += dot(dyf.data(), xp + offset[t], span);
        }
      }
      for (int64_t t = 0; t < taps; ++t) dw[o * taps + t] = dwo[t];
      if (db) db[o] = dbo;
    }
  });
}

template void conv2d_direct_forward<float>(const Conv2dGeometry&, const float*, const float*, const float*, float*);
template void conv2d_direct_forward<BFloat16>(const Conv2dGeometry&, const BFloat16*, const BFloat16*, const float*,
                                              BFloat16*);
template void conv2d_direct_backward_weights<float>(const Conv2dGeometry&, const float*, const float*, float*, float*);
template void conv2d_direct_backward_weights<BFloat16>(const Conv2dGeometry&, const BFloat16*, const BFloat16*, float*,
                                                       float*);

}  // namespace mantissa::cpu
