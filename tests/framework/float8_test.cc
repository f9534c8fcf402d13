// The FP8 types (framework/float8.h) against PyTorch 2.x's answers in tests/golden/float8.h5: every bit
// pattern of E4M3 and E5M2 decoded, and ~14,000 float32 values (every rounding boundary of both formats, the
// subnormal range, overflow, signed zeros, infinities, nans) encoded by x.to(dtype) and by the saturating cast
// x.clamp(-max, max).to(dtype), bit for bit, nans included. Then the FP8 dtypes as tensors: conversion through
// to()/copy_ (strided too), fill_, item, and a clear refusal from the arithmetic ops.
#include "framework/float8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "framework/tensor.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

float float_of(uint32_t b) { return std::bit_cast<float>(b); }

template <typename Format>
void expect_every_pattern_decodes_as_pytorch(const char* group) {
  testing::GoldenFile g("float8.h5");
  const std::vector<uint32_t> want = g.u32(std::string("/") + group + "/decode");
  ASSERT_EQ(want.size(), 256u);
  int nans = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    EXPECT_EQ(Format::to_f32_bits(static_cast<uint8_t>(b)), want[b])
        << group << " pattern 0x" << std::hex << b << " (PyTorch: " << float_of(want[b]) << ")";
    EXPECT_EQ(Format::is_nan(static_cast<uint8_t>(b)), std::isnan(float_of(want[b])))
        << group << " 0x" << std::hex << b;
    nans += std::isnan(float_of(want[b]));
  }
  // E4M3 has two nans (0x7f, 0xff) and no inf; E5M2 has six nans and two infs.
  EXPECT_EQ(nans, std::string(group) == "e4m3" ? 2 : 6);
}

template <typename Format>
void expect_encoding_as_pytorch(const char* group, const char* dataset, Fp8Overflow overflow) {
  testing::GoldenFile g("float8.h5");
  const std::vector<uint32_t> in = g.u32("/input");
  const std::vector<uint8_t> want = g.u8(std::string("/") + group + "/" + dataset);
  ASSERT_EQ(in.size(), want.size());
  ASSERT_GT(in.size(), 10000u);
  int64_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint8_t got = Format::from_f32_bits(in[i], overflow);
    if (got != want[i] && ++mismatches <= 10) {
      ADD_FAILURE() << group << "/" << dataset << ": " << float_of(in[i]) << " (bits 0x" << std::hex << in[i]
                    << ") gave 0x" << int{got} << ", PyTorch 0x" << int{want[i]};
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << in.size();
}

TEST(Float8Golden, EveryE4M3PatternDecodesAsPyTorch) { expect_every_pattern_decodes_as_pytorch<Fp8E4M3Format>("e4m3"); }
TEST(Float8Golden, EveryE5M2PatternDecodesAsPyTorch) { expect_every_pattern_decodes_as_pytorch<Fp8E5M2Format>("e5m2"); }

// PyTorch's x.to(dtype): E4M3 saturates, E5M2 overflows to inf; the scalar types' default does the same.
TEST(Float8Golden, F32ToE4M3AsTensorTo) {
  expect_encoding_as_pytorch<Fp8E4M3Format>("e4m3", "to", Float8E4M3::kDefaultOverflow);
}
TEST(Float8Golden, F32ToE5M2AsTensorTo) {
  expect_encoding_as_pytorch<Fp8E5M2Format>("e5m2", "to", Float8E5M2::kDefaultOverflow);
}
// x.clamp(-max, max).to(dtype): the saturating cast of float8 training.
TEST(Float8Golden, F32ToE4M3Saturated) {
  expect_encoding_as_pytorch<Fp8E4M3Format>("e4m3", "saturated", Fp8Overflow::kSaturate);
}
TEST(Float8Golden, F32ToE5M2Saturated) {
  expect_encoding_as_pytorch<Fp8E5M2Format>("e5m2", "saturated", Fp8Overflow::kSaturate);
}

TEST(Float8Golden, FileSaysWhereItCameFrom) {
  testing::GoldenFile g("float8.h5");
  EXPECT_EQ(g.attr_str("/", "producer"), "scripts/golden/float8.py");
  EXPECT_EQ(g.attr_str("/", "torch_version").substr(0, 2), "2.");
  EXPECT_EQ(g.attr_f64("/e4m3", "max"), Float8E4M3::kMax);
  EXPECT_EQ(g.attr_f64("/e5m2", "max"), Float8E5M2::kMax);
}

// The non-saturating E4M3 cast (the OCP specification's; PyTorch 2.x no longer offers it) has no golden: the
// boundary cases by hand. 464 is halfway between 448 and the first value beyond the format (480) and rounds
// to even (448); anything above it, and inf, is nan.
TEST(Float8, E4M3WithoutSaturationOverflowsToNan) {
  auto enc = [](float f) { return Fp8E4M3Format::from_f32_bits(std::bit_cast<uint32_t>(f), Fp8Overflow::kNoSaturate); };
  EXPECT_EQ(enc(448.0f), 0x7e);
  EXPECT_EQ(enc(464.0f), 0x7e);
  EXPECT_EQ(enc(std::nextafter(464.0f, 1e9f)), 0x7f);
  EXPECT_EQ(enc(-1e6f), 0xff);
  EXPECT_EQ(enc(std::numeric_limits<float>::infinity()), 0x7f);
  EXPECT_EQ(enc(-std::numeric_limits<float>::infinity()), 0xff);
  EXPECT_EQ(enc(std::nextafter(464.0f, 0.0f)), 0x7e);
}

// The encoder by its definition, independent of its bit tricks: the nearest of the format's non-negative finite
// values (found by binary search over the decoded patterns 0..max, plus the first value beyond the format, which
// stands for an overflow), ties to the even pattern; then the sign. Checked on every 509th float32 bit pattern
// (8.4 million, every exponent, both signs, nans and infinities among them), both formats, both overflow rules.
template <typename Format>
uint8_t encode_by_definition(uint32_t x, Fp8Overflow overflow, uint8_t max_bits, double beyond, uint8_t nosat_bits) {
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const float f = std::bit_cast<float>(x);
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7f);
  const uint8_t overflow_bits = overflow == Fp8Overflow::kSaturate ? max_bits : nosat_bits;
  const double a = std::fabs(static_cast<double>(f));
  const auto value = [&](int b) {
    return b > max_bits ? beyond
                        : static_cast<double>(std::bit_cast<float>(Format::to_f32_bits(static_cast<uint8_t>(b))));
  };
  if (a >= beyond) return static_cast<uint8_t>(sign | overflow_bits);
  int lo = 0, hi = max_bits + 1;  // value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (value(mid) <= a ? lo : hi) = mid;
  }
  const double below = a - value(lo), above = value(hi) - a;
  const int b = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint8_t>(sign | (b > max_bits ? overflow_bits : b));
}

TEST(Float8, EncoderMatchesItsDefinitionAcrossFloat32) {
  int64_t checked = 0;
  for (uint64_t x = 0; x <= 0xffffffffu; x += 509) {
    const auto bits = static_cast<uint32_t>(x);
    for (Fp8Overflow o : {Fp8Overflow::kSaturate, Fp8Overflow::kNoSaturate}) {
      ASSERT_EQ(Fp8E4M3Format::from_f32_bits(bits, o), encode_by_definition<Fp8E4M3Format>(bits, o, 0x7e, 480.0, 0x7f))
          << std::hex << "e4m3 0x" << bits;
      ASSERT_EQ(Fp8E5M2Format::from_f32_bits(bits, o),
                encode_by_definition<Fp8E5M2Format>(bits, o, 0x7b, 65536.0, 0x7c))
          << std::hex << "e5m2 0x" << bits;
    }
    ++checked;
  }
  EXPECT_GT(checked, 8'000'000);
}

TEST(Float8, RoundTripOfEveryFiniteValueIsExact) {
  for (uint32_t b = 0; b < 256; ++b) {
    const auto e4 = Float8E4M3::from_bits(static_cast<uint8_t>(b));
    if (!Fp8E4M3Format::is_nan(e4.bits)) {
      EXPECT_EQ(Float8E4M3(static_cast<float>(e4)).bits, b);
    }
    const auto e5 = Float8E5M2::from_bits(static_cast<uint8_t>(b));
    if (!Fp8E5M2Format::is_nan(e5.bits)) {
      EXPECT_EQ(Float8E5M2(static_cast<float>(e5)).bits, b);
    }
  }
}

// ---- FP8 tensors ----

TEST(Float8Tensor, ConvertsThroughToAndBackAsTheScalarType) {
  const std::vector<float> v = {0.0f, -0.0f, 1.0f, 0.3f, -447.0f, 470.0f, 1e-3f, -1e9f, 60000.0f, 2e-5f};
  const Tensor x = from_vector<float>(v, {2, 5});
  const Tensor e4 = x.to(kFloat8E4M3);
  const Tensor e5 = x.to(kFloat8E5M2);
  ASSERT_EQ(e4.dtype(), kFloat8E4M3);
  ASSERT_EQ(e4.nbytes(), 10u);
  const Tensor back4 = e4.to(kFloat32);
  const Tensor back5 = e5.to(kFloat32);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(e4.data<Float8E4M3>()[i].bits, Float8E4M3(v[i]).bits) << v[i];
    EXPECT_EQ(e5.data<Float8E5M2>()[i].bits, Float8E5M2(v[i]).bits) << v[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(back4.data<float>()[i]), std::bit_cast<uint32_t>(float(Float8E4M3(v[i]))));
    EXPECT_EQ(std::bit_cast<uint32_t>(back5.data<float>()[i]), std::bit_cast<uint32_t>(float(Float8E5M2(v[i]))));
  }
  // A strided source (a transpose), and from bf16 and f64: the same bits as through float.
  const Tensor t = x.t().to(kFloat8E4M3).to(kFloat32);
  const Tensor ref = x.to(kFloat8E4M3).to(kFloat32).t().contiguous();
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(t.contiguous().data<float>()[i], ref.data<float>()[i]) << i;
  const Tensor from_f64 = x.to(kFloat64).to(kFloat8E5M2);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(from_f64.data<Float8E5M2>()[i].bits, e5.data<Float8E5M2>()[i].bits);
  // E4M3 -> E5M2 directly: through float, so the same as decoding then encoding.
  const Tensor cross = e4.to(kFloat8E5M2);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(cross.data<Float8E5M2>()[i].bits, Float8E5M2(float(e4.data<Float8E4M3>()[i])).bits);
  }
}

TEST(Float8Tensor, FillAndItem) {
  Tensor t = empty({3}, {.dtype = kFloat8E5M2});
  fill_(t, 0.3);
  EXPECT_EQ(t.data<Float8E5M2>()[2].bits, Float8E5M2(0.3f).bits);
  EXPECT_EQ(t.select(0, 1).item(), static_cast<double>(float(Float8E5M2(0.3f))));
  EXPECT_NE(t.str().find("f8e5m2"), std::string::npos);
}

TEST(Float8Tensor, ArithmeticIsRefusedWithAHint) {
  const Tensor a = ones({4}).to(kFloat8E4M3);
  // Ops that check for a floating dtype name the FP8 one; the kernels dispatched over every dtype say why
  // and what to do.
  try {
    (void)sum(a);
    FAIL() << "sum of an FP8 tensor should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("got f8e4m3"), std::string::npos) << e.what();
  }
  try {
    (void)eq(a, a);
    FAIL() << "eq of FP8 tensors should throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no kernel for f8e4m3"), std::string::npos) << m;
    EXPECT_NE(m.find("HINT: convert with .to(kF32)"), std::string::npos) << m;
  }
  EXPECT_THROW((void)add(a, ones({4})), Error);
  EXPECT_THROW((void)promote_types(kFloat8E4M3, kFloat32), Error);
}

}  // namespace
}  // namespace mantissa
