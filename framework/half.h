// Half (IEEE binary16) and BFloat16 scalar types: 16-bit storage, conversion from float with
// round-to-nearest-even, exact conversion to float. Arithmetic goes through float, so an expression
// of Halfs computes in fp32 and rounds once where the result is stored.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

// With F16C (the x86-64-v3 baseline) a scalar conversion at run time is one instruction; it gives the
// same bits as the portable code below (tests/framework/convert_test.cc checks every pattern).
#if defined(__F16C__) && !defined(__CUDACC__)
#include <immintrin.h>
#define MANTISSA_SCALAR_F16C 1
#endif

namespace mantissa {

namespace detail {

// float -> binary16, round to nearest even; overflow to inf, nan stays nan (quiet, sign kept).
constexpr uint16_t float_to_half_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                               // below 2^-14: subnormal
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // below 2^-25 rounds to 0
    // Shift the full significand (with the implicit bit) into subnormal position; round to even.
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 - (e - 127) + 13 - 1 + 1 = 126 - e
    const uint32_t half_mant = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = half_mant + ((rem > halfway || (rem == halfway && (half_mant & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped bits to even. A carry out of the
  // significand correctly bumps the exponent.
  uint32_t r = abs - 0x38000000u;  // exponent -= 112
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

constexpr float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  // inf stays inf; a nan keeps its payload and comes out quiet, as F16C, GPUs and PyTorch do it.
  if (exp == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0u));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: value = mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float -> bfloat16: keep the top 16 bits, round to nearest even; nan stays a quiet nan.
constexpr uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

constexpr float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

struct FromBits {};

}  // namespace detail

struct Half {
  uint16_t bits = 0;
  constexpr Half() = default;
  constexpr Half(uint16_t b, detail::FromBits) : bits(b) {}
  constexpr Half(float f) : bits(convert_from(f)) {}  // NOLINT: implicit like float
  constexpr operator float() const {
#ifdef MANTISSA_SCALAR_F16C
    if (!std::is_constant_evaluated()) return _cvtsh_ss(bits);
#endif
    return detail::half_bits_to_float(bits);
  }
  static constexpr uint16_t convert_from(float f) {
#ifdef MANTISSA_SCALAR_F16C
    if (!std::is_constant_evaluated()) return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#endif
    return detail::float_to_half_bits(f);
  }
  static constexpr Half from_bits(uint16_t b) { return Half(b, detail::FromBits{}); }
};

struct BFloat16 {
  uint16_t bits = 0;
  constexpr BFloat16() = default;
  constexpr BFloat16(uint16_t b, detail::FromBits) : bits(b) {}
  constexpr BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT
  constexpr operator float() const { return detail::bf16_bits_to_float(bits); }
  static constexpr BFloat16 from_bits(uint16_t b) { return BFloat16(b, detail::FromBits{}); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace mantissa
