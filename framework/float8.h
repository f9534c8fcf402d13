// The two 8-bit float formats of FP8 training, as PyTorch names them: E4M3 (float8_e4m3fn: 4 exponent bits,
// 3 mantissa bits, bias 7, no infinity, 0x7f/0xff are nan, max 448) for activations and weights, and E5M2
// (float8_e5m2: 5 exponent bits, 2 mantissa bits, bias 15, IEEE-like with inf and nans, max 57344) for
// gradients. Conversions from float round to nearest even; the bit functions are MT_HD so CUDA kernels run the
// very code the CPU tests check against PyTorch (tests/golden/float8.h5).
//
// Overflow, which is where the two formats and the two conventions differ:
//   Fp8Overflow::kSaturate    finite values that round above the maximum, and infinities, become +-max.
//   Fp8Overflow::kNoSaturate  they become inf in E5M2 and nan in E4M3 (which has no inf): the OCP FP8
//                             specification's non-saturating mode.
// PyTorch's x.to(dtype) saturates E4M3 (since 2.x; 1.x gave nan) and does not saturate E5M2; its saturating
// cast for E5M2 is x.clamp(-max, max).to(dtype) (torchao). fp8_default_overflow() is PyTorch's choice per
// format, what Tensor::to and copy_ use. Nan stays nan (0x7f with the input's sign) in every mode.
#pragma once

#include <bit>
#include <cstdint>

#include "framework/host_device.h"

namespace mantissa {

enum class Fp8Overflow : uint8_t { kSaturate, kNoSaturate };

namespace detail {

// One format: kMant mantissa bits, exponent bias kBias, the pattern of its largest finite value, and what a
// non-saturating overflow gives.
template <int kMant, int kBias, uint8_t kMaxBits, uint8_t kNoSatOverflowBits>
struct Fp8Format {
  static constexpr uint8_t kNanBits = 0x7f;

  // c ? a : b with masks, which compilers keep branch-free inside vectorized loops.
  MT_HD static constexpr uint32_t pick(bool c, uint32_t a, uint32_t b) {
    const uint32_t mask = 0u - static_cast<uint32_t>(c);
    return (a & mask) | (b & ~mask);
  }
  MT_HD static constexpr uint32_t min_u32(uint32_t a, uint32_t b) { return pick(a < b, a, b); }

  // float (as its bits) -> 8 bits, round to nearest even. Branch-free integer code (each case computed, then
  // picked), so the CPU's element loops vectorize it and CUDA runs it as it is: normals rebias the exponent and
  // round the dropped bits to even (a carry bumps the exponent; past kMaxBits is an overflow). Below the smallest
  // normal the value is counted in units of the smallest subnormal 2^(1 - bias - mant): the significand shifted
  // right by 24 - mant or more, rounded to even (a count of 2^mant is the smallest normal, which is also its
  // right encoding). A shift of 25 or more gives 0, which covers float subnormals and values up to half a unit.
  MT_HD static constexpr uint8_t from_f32_bits(uint32_t x, Fp8Overflow overflow) {
    const uint32_t sign = (x >> 24) & 0x80u;
    const uint32_t abs = x & 0x7fffffffu;
    const uint32_t overflow_bits = overflow == Fp8Overflow::kSaturate ? kMaxBits : kNoSatOverflowBits;
    // Normal.
    constexpr uint32_t kDrop = 23u - kMant;
    const uint32_t r = abs - ((127u - kBias) << 23);  // wraps below the normal range, where it is not picked
    const uint32_t normal = (r + ((1u << (kDrop - 1u)) - 1u) + ((r >> kDrop) & 1u)) >> kDrop;
    // Below the smallest normal. The shift wraps above the subnormal range (not picked); the cap keeps it < 32.
    const uint32_t shift = min_u32(151u - kBias - kMant - (abs >> 23), 25u);
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t small = (m + ((1u << shift) >> 1u) - 1u + ((m >> shift) & 1u)) >> shift;
    constexpr uint32_t kMinNormalBits = (127u + 1u - kBias) << 23;
    uint32_t out = pick(abs < kMinNormalBits, small, normal);
    out = pick((out > kMaxBits) | (abs == 0x7f800000u), overflow_bits, out);  // rounded past the maximum, or inf
    out = pick(abs > 0x7f800000u, kNanBits, out);
    return static_cast<uint8_t>(sign | out);
  }

  // 8 bits -> float bits, exact. A nan comes out quiet with its payload (as PyTorch decodes it).
  MT_HD static constexpr uint32_t to_f32_bits(uint8_t b) {
    const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
    const uint32_t exp = (b >> kMant) & ((0x7fu >> kMant));
    const uint32_t mant = b & ((1u << kMant) - 1u);
    constexpr uint32_t kExpAllOnes = 0x7fu >> kMant;
    if (is_nan(b)) return sign | 0x7fc00000u | (mant << (23 - kMant));
    if (exp == kExpAllOnes && kNoSatOverflowBits != kNanBits) return sign | 0x7f800000u;  // E5M2 inf
    if (exp == 0) {
      if (mant == 0) return sign;
      // Subnormal: normalize mant * 2^(1 - bias - kMant) into a float (a few bits, exact).
      int shift = 0;
      uint32_t m = mant;
      while ((m & (1u << kMant)) == 0) {
        m <<= 1;
        ++shift;
      }
      const uint32_t fexp = 127u + 1u - kBias - static_cast<uint32_t>(shift);
      return sign | (fexp << 23) | ((m & ((1u << kMant) - 1u)) << (23 - kMant));
    }
    return sign | ((exp + 127u - kBias) << 23) | (mant << (23 - kMant));
  }

  MT_HD static constexpr bool is_nan(uint8_t b) {
    if constexpr (kNoSatOverflowBits == kNanBits) {
      return (b & 0x7fu) == 0x7fu;  // E4M3: only S.1111.111
    } else {
      return (b & 0x7fu) > 0x7cu;  // E5M2: exponent all ones, mantissa non-zero
    }
  }
};

}  // namespace detail

using Fp8E4M3Format = detail::Fp8Format<3, 7, 0x7e, 0x7f>;
using Fp8E5M2Format = detail::Fp8Format<2, 15, 0x7b, 0x7c>;

// The scalar types: 8-bit storage; conversion from float as PyTorch's x.to(dtype) (E4M3 saturates, E5M2 does
// not); to float exact. Arithmetic goes through float: there are no FP8 kernels besides conversion and the
// scaled matmul (ops/fp8/fp8.h).
struct Float8E4M3 {
  uint8_t bits = 0;
  static constexpr float kMax = 448.0f;
  static constexpr Fp8Overflow kDefaultOverflow = Fp8Overflow::kSaturate;
  constexpr Float8E4M3() = default;
  constexpr Float8E4M3(float f)  // NOLINT: implicit like float
      : bits(Fp8E4M3Format::from_f32_bits(std::bit_cast<uint32_t>(f), kDefaultOverflow)) {}
  constexpr Float8E4M3(float f, Fp8Overflow overflow)
      : bits(Fp8E4M3Format::from_f32_bits(std::bit_cast<uint32_t>(f), overflow)) {}
  constexpr operator float() const { return std::bit_cast<float>(Fp8E4M3Format::to_f32_bits(bits)); }
  static constexpr Float8E4M3 from_bits(uint8_t b) {
    Float8E4M3 v;
    v.bits = b;
    return v;
  }
};

struct Float8E5M2 {
  uint8_t bits = 0;
  static constexpr float kMax = 57344.0f;
  static constexpr Fp8Overflow kDefaultOverflow = Fp8Overflow::kNoSaturate;
  constexpr Float8E5M2() = default;
  constexpr Float8E5M2(float f)  // NOLINT: implicit like float
      : bits(Fp8E5M2Format::from_f32_bits(std::bit_cast<uint32_t>(f), kDefaultOverflow)) {}
  constexpr Float8E5M2(float f, Fp8Overflow overflow)
      : bits(Fp8E5M2Format::from_f32_bits(std::bit_cast<uint32_t>(f), overflow)) {}
  constexpr operator float() const { return std::bit_cast<float>(Fp8E5M2Format::to_f32_bits(bits)); }
  static constexpr Float8E5M2 from_bits(uint8_t b) {
    Float8E5M2 v;
    v.bits = b;
    return v;
  }
};

static_assert(sizeof(Float8E4M3) == 1 && sizeof(Float8E5M2) == 1);
static_assert(static_cast<float>(Float8E4M3::from_bits(0x7e)) == Float8E4M3::kMax);
static_assert(static_cast<float>(Float8E5M2::from_bits(0x7b)) == Float8E5M2::kMax);
static_assert(Float8E4M3(1.0f).bits == 0x38 && Float8E5M2(1.0f).bits == 0x3c);

}  // namespace mantissa
