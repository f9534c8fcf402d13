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
// 88.73, 0 far below -103, nan for nan. Tested against std::exp in tests/ops/softmax_test.cc.
inline float fast_expf(float x) {
  // Branch-free (min/max, no ?:) so that the loop vectorizes; a nan passes through the clamp and
  // every step after it, so the result is nan.
  const float xc = std::min(std::max(x, -104.0f), 88.8f);
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
  return p * s1 * s2;
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

}  // namespace mantissa::cpu
