// Half and BFloat16: the scalar conversions against PyTorch's answers in tests/golden/dtypes.h5 (every
// 16-bit pattern, and its f32 -> 16-bit rounding cases), their edge cases, and the vectorized bulk
// converters of every instruction set this CPU has against the scalar path, bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "framework/convert.h"
#include "framework/half.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t b) { return std::bit_cast<float>(b); }
bool is_nan_f16(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
bool is_nan_bf16(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

std::vector<ConvertIsa> supported_isas() {
  std::vector<ConvertIsa> out;
  for (ConvertIsa isa : {ConvertIsa::kScalar, ConvertIsa::kAvx2, ConvertIsa::kAvx512}) {
    if (convert_isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

// ---- golden: PyTorch 1.13 on the CPU. Its rounding attribute says nan payloads may differ, so a nan
// matches any nan where noted; every other value must match bit for bit. ----

// f16 -> f32 matches even in the nan payloads: PyTorch, F16C and the scalar path all keep the payload
// and set the quiet bit, so here every pattern must agree exactly.
TEST(DTypeGolden, EveryF16PatternToF32) {
  testing::GoldenFile g("dtypes.h5");
  const std::vector<uint16_t> in = g.u16("/f16_to_f32/bits");
  const std::vector<float> want = g.f32("/f16_to_f32/f32");
  ASSERT_EQ(in.size(), 65536u);
  for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(in[i], i) << "the file should hold every pattern in order";
  for (ConvertIsa isa : supported_isas()) {
    std::vector<float> got(in.size());
    convert_kernels(isa).f16_to_f32(reinterpret_cast<const Half*>(in.data()), got.data(), 65536);
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(bits_of(got[i]), bits_of(want[i])) << convert_isa_name(isa) << " bits 0x" << std::hex << in[i];
      EXPECT_EQ(bits_of(static_cast<float>(Half::from_bits(in[i]))), bits_of(want[i]))
          << "scalar, bits 0x" << std::hex << in[i];
    }
  }
}

// bf16 -> f32: PyTorch wrote every nan as 0xffff0000; we keep the payload (a plain shift), so nans
// match as nans and everything else bit for bit.
TEST(DTypeGolden, EveryBF16PatternToF32) {
  testing::GoldenFile g("dtypes.h5");
  const std::vector<uint16_t> in = g.u16("/bf16_to_f32/bits");
  const std::vector<float> want = g.f32("/bf16_to_f32/f32");
  ASSERT_EQ(in.size(), 65536u);
  for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(in[i], i) << "the file should hold every pattern in order";
  for (ConvertIsa isa : supported_isas()) {
    std::vector<float> got(in.size());
    convert_kernels(isa).bf16_to_f32(reinterpret_cast<const BFloat16*>(in.data()), got.data(), 65536);
    for (size_t i = 0; i < in.size(); ++i) {
      const float scalar = static_cast<float>(BFloat16::from_bits(in[i]));
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i]) && std::isnan(scalar)) << convert_isa_name(isa) << " bits " << in[i];
      } else {
        EXPECT_EQ(bits_of(got[i]), bits_of(want[i])) << convert_isa_name(isa) << " bits " << in[i];
        EXPECT_EQ(bits_of(scalar), bits_of(want[i])) << "scalar, bits " << in[i];
      }
    }
  }
}

TEST(DTypeGolden, F32ToF16Rounding) {
  testing::GoldenFile g("dtypes.h5");
  const std::vector<float> in = g.f32("/f32_to_f16/f32");
  const std::vector<uint16_t> want = g.u16("/f32_to_f16/bits");
  ASSERT_EQ(in.size(), want.size());
  ASSERT_GT(in.size(), 20000u);
  for (ConvertIsa isa : supported_isas()) {
    std::vector<uint16_t> got(in.size());
    convert_kernels(isa).f32_to_f16(in.data(), reinterpret_cast<Half*>(got.data()), static_cast<int64_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t scalar = Half(in[i]).bits;
      if (is_nan_f16(want[i])) {
        EXPECT_TRUE(is_nan_f16(got[i]) && is_nan_f16(scalar)) << convert_isa_name(isa) << " input " << in[i];
      } else {
        EXPECT_EQ(got[i], want[i]) << convert_isa_name(isa) << " input bits 0x" << std::hex << bits_of(in[i]);
        EXPECT_EQ(scalar, want[i]) << "scalar, input bits 0x" << std::hex << bits_of(in[i]);
      }
    }
  }
}

// f32 -> bf16: PyTorch's vectorized path writes nan as 0xffff, ours keeps sign and payload top bits.
TEST(DTypeGolden, F32ToBF16Rounding) {
  testing::GoldenFile g("dtypes.h5");
  const std::vector<float> in = g.f32("/f32_to_bf16/f32");
  const std::vector<uint16_t> want = g.u16("/f32_to_bf16/bits");
  ASSERT_EQ(in.size(), want.size());
  ASSERT_GT(in.size(), 20000u);
  for (ConvertIsa isa : supported_isas()) {
    std::vector<uint16_t> got(in.size());
    convert_kernels(isa).f32_to_bf16(in.data(), reinterpret_cast<BFloat16*>(got.data()),
                                     static_cast<int64_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t scalar = BFloat16(in[i]).bits;
      if (is_nan_bf16(want[i])) {
        EXPECT_TRUE(is_nan_bf16(got[i]) && is_nan_bf16(scalar)) << convert_isa_name(isa) << " input " << in[i];
      } else {
        EXPECT_EQ(got[i], want[i]) << convert_isa_name(isa) << " input bits 0x" << std::hex << bits_of(in[i]);
        EXPECT_EQ(scalar, want[i]) << "scalar, input bits 0x" << std::hex << bits_of(in[i]);
      }
    }
  }
}

// ---- scalar edge cases ----

TEST(DTypeHalf, OverflowRoundsToInfAtHalfwayPastMax) {
  EXPECT_EQ(Half(65504.0f).bits, 0x7bffu);    // the largest finite half
  EXPECT_EQ(Half(65519.996f).bits, 0x7bffu);  // just below the halfway point
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00u);    // halfway to 65536 ties up (even): inf
  EXPECT_EQ(Half(-65520.0f).bits, 0xfc00u);
  EXPECT_EQ(Half(1e10f).bits, 0x7c00u);
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7c00u);
  EXPECT_EQ(Half(-std::numeric_limits<float>::infinity()).bits, 0xfc00u);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(std::exp(100.0f)))));  // exp(100) in f16 is inf
}

TEST(DTypeHalf, SubnormalsAndSignedZero) {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest half subnormal
  EXPECT_EQ(Half(tiny).bits, 0x0001u);
  EXPECT_EQ(Half(-tiny).bits, 0x8001u);
  EXPECT_EQ(Half(std::ldexp(1.0f, -25)).bits, 0x0000u);                        // tie between 0 and 2^-24: even is 0
  EXPECT_EQ(Half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001u);  // just past the tie
  EXPECT_EQ(Half(3 * std::ldexp(1.0f, -25)).bits, 0x0002u);                    // 1.5 * 2^-24 ties to even 2
  EXPECT_EQ(Half(std::ldexp(1023.0f, -24)).bits, 0x03ffu);                     // the largest subnormal
  EXPECT_EQ(Half(std::ldexp(1.0f, -14)).bits, 0x0400u);                        // the smallest normal
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x0001)), tiny);
  EXPECT_EQ(Half(0.0f).bits, 0x0000u);
  EXPECT_EQ(Half(-0.0f).bits, 0x8000u);
  EXPECT_EQ(bits_of(static_cast<float>(Half::from_bits(0x8000))), 0x80000000u);
  EXPECT_EQ(Half(std::numeric_limits<float>::denorm_min()).bits, 0x0000u);
  EXPECT_EQ(Half(-std::numeric_limits<float>::denorm_min()).bits, 0x8000u);
}

TEST(DTypeHalf, TiesRoundToEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even mantissa (1.0) wins; 1 + 3 * 2^-11 goes up.
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00u);
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02u);
  EXPECT_EQ(Half(2049.0f).bits, Half(2048.0f).bits);  // spacing is 2 above 2048: 2049 ties to even 2048
  EXPECT_EQ(Half(2051.0f).bits, Half(2052.0f).bits);  // and 2051 ties to even 2052
}

TEST(DTypeBFloat16, EdgeCases) {
  EXPECT_EQ(BFloat16(float_of(0x7f7f7fffu)).bits, 0x7f7fu);  // below halfway: the largest finite bf16
  EXPECT_EQ(BFloat16(float_of(0x7f7f8000u)).bits, 0x7f80u);  // halfway, odd mantissa: rounds up to inf
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80u);
  EXPECT_EQ(BFloat16(float_of(0x3f808000u)).bits, 0x3f80u);  // tie, even mantissa stays
  EXPECT_EQ(BFloat16(float_of(0x3f818000u)).bits, 0x3f82u);  // tie, odd mantissa goes up
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000u);
  // bf16 keeps f32's subnormals: the smallest f32 subnormal rounds to zero, a larger one survives.
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000u);
  EXPECT_EQ(BFloat16(float_of(0x00018000u)).bits, 0x0002u);  // tie, odd mantissa 1 goes up to 2
  EXPECT_EQ(BFloat16(float_of(0x80010000u)).bits, 0x8001u);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A nan whose payload lives only in the low 16 bits must not become inf.
  EXPECT_TRUE(is_nan_bf16(BFloat16(float_of(0x7f800001u)).bits));
  EXPECT_TRUE(is_nan_bf16(BFloat16(float_of(0xff80ffffu)).bits));
}

TEST(DTypeRoundTrip, Every16BitPatternSurvivesF32) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const uint16_t via_half = Half(static_cast<float>(Half::from_bits(h))).bits;
    const uint16_t via_bf16 = BFloat16(static_cast<float>(BFloat16::from_bits(h))).bits;
    if (is_nan_f16(h)) {
      EXPECT_TRUE(is_nan_f16(via_half)) << b;
    } else {
      EXPECT_EQ(via_half, h) << b;
    }
    if (is_nan_bf16(h)) {
      EXPECT_TRUE(is_nan_bf16(via_bf16)) << b;
    } else {
      EXPECT_EQ(via_bf16, h) << b;
    }
  }
}

}  // namespace
}  // namespace mantissa
