// Elementwise math written so that loops over it vectorize (glibc's expf is a call per element).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace mantissa::cpu {

// exp for float written so that loops over it vectorize (glibc's expf is a call per element): n =
// round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2], exp(r) by its degree-7 Taylor polynomial
// (truncation error < 1e-8 relative), times 2^n built from the exponent bits in two halves so that
// n = 128 still overflows to inf correctly. Within 2 ulp of std::exp for normal results; inf above
// 88.73, 0 below -103.97 (exactly 0 below -104), nan for nan. Tested in tests/ops/softmax_test.cc.
inline float fast_expf(float x) {
  // Below -104 (the result is 0) the computation runs on x = 0 and the result is masked to 0: letting it
  // run on -104 makes the last multiply underflow to a subnormal, and each underflow costs a microcode
  // assist (~100+ cycles), which dominated softmax over causally masked (-inf) scores.
  const int32_t keep = -static_cast<int32_t>(!(x < -104.0f));  // all ones, or 0 below -104 (a nan keeps)
  // Branch-free (min/max, no ?:) so that the loop vectorizes; a nan passes through the clamp and
  // every step after it, so the result is nan.
  const float xc = std::bit_cast<float>(std::bit_cast<int32_t>(std::min(std::max(x, -104.0f), 88.8f)) & keep);
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  const float kf = std::fma(xc, 1.44269504088896341f, kShift);
  const float n = kf - kShift;
  const int32_t ni = std::bit_cast<int32_t>(kf) - std::bit_cast<int32_t>(kShift);
  float r = std::fma(n, -0.693359375f, xc);  // ln2 split in a 9-bit head (exact product) and a tail
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<int32_t>(p * s1 * s2) & keep);
}

// erf for float, branch-free so that loops over it vectorize (glibc's erff is a call per element).
// |x| < 1.25: erf(x) = x + x P(x^2), P a degree-7 fit of erf(x)/x - 1 (error < 1e-9, so the leading x
// stays exact and one fma rounds). 1.25 <= |x|: erf(|x|) = 1 - exp(Q(|x|) - x^2), Q a degree-9 fit
// of log(erfc(t)) + t^2 on [1.25, 4] in powers of t - 2.625 (error < 2e-9); removing t^2 keeps Q's
// magnitude below 3 so its rounding is small, and erfc < 0.08 there so exp's 2 ulp barely show. |x| is
// clamped to 4, where erf rounds to 1. Coefficients fitted by Chebyshev interpolation in double. Within
// 2 ulp of std::erf (the max is measured over a dense sweep in tests/ops/vec_math_test.cc); odd, nan
// for nan, +-1 for +-inf.
inline float fast_erff(float x) {
  const float ax = std::fabs(x);
  // t = min(|x|, 4) as an integer min on the bits (ordered like the values for x >= 0; a nan becomes 4):
  // a float min here lets GCC thread branches through the function and the loop no longer vectorizes.
  const float t = std::bit_cast<float>(std::min(std::bit_cast<int32_t>(ax), std::bit_cast<int32_t>(4.0f)));
  const float s = x * x;
  float p = -7.616689270288036e-06f;
  p = std::fma(p, s, 1.0418097659910886e-04f);
  p = std::fma(p, s, -8.344853611565387e-04f);
  p = std::fma(p, s, 5.209589658297557e-03f);
  p = std::fma(p, s, -2.686056827911811e-02f);
  p = std::fma(p, s, 1.1283683625167697e-01f);
  p = std::fma(p, s, -3.761263091622339e-01f);
  p = std::fma(p, s, 1.2837916612178976e-01f);
  const float small = std::fma(x, p, x);
  const float u = t - 2.625f;  // exact for t in [1.25, 4]
  float q = -1.2325965434016528e-07f;
  q = std::fma(q, u, 1.5453045166326844e-06f);
  q = std::fma(q, u, -1.114875706410635e-05f);
  q = std::fma(q, u, 6.670920905584086e-05f);
  q = std::fma(q, u, -3.6710616474761406e-04f);
  q = std::fma(q, u, 1.9195369702408676e-03f);
  q = std::fma(q, u, -9.83821404340809e-03f);
  q = std::fma(q, u, 5.222957241911651e-02f);
  q = std::fma(q, u, -3.3914673834546066e-01f);
  q = std::fma(q, u, -1.6000443978851158f);
  const float large = std::copysign(1.0f - fast_expf(std::fma(-t, t, q)), x);
  // A bit-mask select, not ?: : GCC (with trapping math) does not if-convert a float compare feeding ?:.
  // A nan takes the polynomial branch (fmin turned its t into 4), which gives nan.
  const int32_t use_small = -static_cast<int32_t>(!(ax >= 1.25f));
  return std::bit_cast<float>((std::bit_cast<int32_t>(small) & use_small) |
                              (std::bit_cast<int32_t>(large) & ~use_small));
}

// erf in a kernel's compute type: fast_erff for float (f32, f16, bf16), std::erf for double.
template <typename C>
inline C erf_compute(C v) {
  if constexpr (std::is_same_v<C, float>) {
    return fast_erff(v);
  } else {
    return std::erf(v);
  }
}

// exp in a kernel's compute type: fast_expf for float (f32, f16, bf16), std::exp for double.
template <typename C>
inline C exp_compute(C v) {
  if constexpr (std::is_same_v<C, float>) {
    return fast_expf(v);
  } else {
    return std::exp(v);
  }
}

// The math policy the CPU ops hand to the formulas of ops/pointwise_math.h: exp and erf above (loops
// over them vectorize; within 2 ulp of libm), libm for the rest. The CUDA kernels take
// pointwise::LibMath there, so only these primitives differ between the devices, never the formulas.
// fma is a * b + c rounded once through g++'s contraction (on by default in C++; x86-64-v3 has FMA),
// not a call to std::fma, which would keep the strided loops of ops/cpu/loops.h from vectorizing (see
// ops/pointwise_math.h); the host tests check it against LibMath's explicit fma bit for bit. Always
// inlined, as the formulas are: each is one call in an element loop (see MT_FORMULA there).
struct VecMath {
  template <typename C>
  [[gnu::always_inline]] static C fma(C a, C b, C c) {
    return a * b + c;
  }
  template <typename C>
  [[gnu::always_inline]] static C exp(C x) {
    return exp_compute(x);
  }
  template <typename C>
  [[gnu::always_inline]] static C erf(C x) {
    return erf_compute(x);
  }
  template <typename C>
  [[gnu::always_inline]] static C log(C x) {
    return std::log(x);
  }
  template <typename C>
  [[gnu::always_inline]] static C tanh(C x) {
    return std::tanh(x);
  }
  template <typename C>
  [[gnu::always_inline]] static C pow(C x, C e) {
    return std::pow(x, e);
  }
};

}  // namespace mantissa::cpu
