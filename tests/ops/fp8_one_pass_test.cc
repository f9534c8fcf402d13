// The one-pass CPU quantize (ops/fp8/fp8_cpu.h: widen, amax, scale, overflow count and cast in one sweep over
// each block) against the reference arithmetic, element by element, on awkward inputs: nans with payloads and
// signs, infinities, the values on either side of each format's saturation boundary, f32 and FP8 subnormals,
// signed zeros, sizes that are not a multiple of the block (and empty), for every input dtype, format, overflow
// rule and instruction-set variant this CPU runs. The reference is the scalar code the kernel started from: the
// input widened by its scalar conversion, y = x * scale in f32, framework/float8.h's cast of y, an overflow
// where the non-saturating cast gives inf or nan, and the integer maximum of |x|'s bits.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "framework/convert.h"
#include "framework/half.h"
#include "ops/fp8/fp8_cpu.h"
#include "ops/fp8/fp8_math.h"

namespace mantissa {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// Awkward values first, then random ones over many binades; n values in all.
std::vector<float> awkward_values(int64_t n, uint32_t seed) {
  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       kInf,
                                       -kInf,
                                       from_bits(0x7fc00000u),
                                       from_bits(0xffc00001u),
                                       from_bits(0x7f800001u),  // nans
                                       from_bits(0x7fbfffffu),  // signalling, payload
                                       448.0f,
                                       -448.0f,
                                       464.0f,
                                       std::nextafter(464.0f, kInf),
                                       std::nextafter(464.0f, 0.0f),
                                       480.0f,  // E4M3's edge
                                       57344.0f,
                                       61440.0f,
                                       std::nextafter(61440.0f, 0.0f),
                                       -std::nextafter(61440.0f, kInf),
                                       65536.0f,  // E5M2's
                                       from_bits(1u),
                                       from_bits(0x007fffffu),
                                       -from_bits(0x00400000u),  // f32 subnormals
                                       std::ldexp(1.0f, -9),
                                       std::ldexp(1.5f, -10),
                                       std::ldexp(1.0f, -10),  // E4M3 subnormals, half
                                       std::ldexp(1.0f, -16),
                                       std::ldexp(1.0f, -17),
                                       std::ldexp(1.5f, -17),  // E5M2 subnormals, half
                                       std::numeric_limits<float>::max(),
                                       -std::numeric_limits<float>::min()};
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-30, 20), sign(0, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = i < specials.size() ? specials[i] : std::ldexp(mant(gen), exp(gen)) * (sign(gen) ? -1.0f : 1.0f);
  // Spread the specials over the blocks too (not only the first), where there is room.
  for (size_t i = 0; i < specials.size() && specials.size() + 300 * i < v.size(); ++i)
    v[specials.size() + 300 * i] = specials[i];
  return v;
}

template <typename In>
std::vector<In> as(const std::vector<float>& v) {
  std::vector<In> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = In(v[i]);
  return out;
}
template <>
std::vector<float> as<float>(const std::vector<float>& v) {
  return v;
}

template <typename Format>
void expect_one_pass_equals_reference(const char* in_name, const auto& x, float scale, Fp8Overflow overflow, DType fp8,
                                      ConvertIsa isa) {
  const int64_t n = static_cast<int64_t>(x.size());
  SCOPED_TRACE(std::string(in_name) + " -> " + std::string(dtype_name(fp8)) +
               (overflow == Fp8Overflow::kSaturate ? " saturating" : " not saturating") + ", scale " +
               std::to_string(scale) + ", n " + std::to_string(n) + ", " + std::string(convert_isa_name(isa)));
  std::vector<uint8_t> out(x.size() + 1, 0xa5);  // one byte past the end, which must stay untouched
  const cpu::Fp8PassStats got = cpu::quantize_fp8(x.data(), n, scale, fp8, overflow, out.data(), isa);
  uint32_t amax = 0;
  int64_t overflows = 0, mismatches = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(x[static_cast<size_t>(i)]);
    const float y = v * scale;
    const uint8_t want = Format::from_f32_bits(std::bit_cast<uint32_t>(y), overflow);
    if (out[static_cast<size_t>(i)] != want && mismatches++ == 0) first = i;
    if (!std::isnan(y)) {
      const uint8_t nosat = Format::from_f32_bits(std::bit_cast<uint32_t>(y), Fp8Overflow::kNoSaturate);
      const float back = std::bit_cast<float>(Format::to_f32_bits(nosat));
      overflows += std::isnan(back) || std::isinf(back) ? 1 : 0;
    }
    amax = std::max(amax, std::bit_cast<uint32_t>(v) & 0x7fffffffu);
  }
  EXPECT_EQ(mismatches, 0) << "first at " << first;
  EXPECT_EQ(out.back(), 0xa5) << "wrote past the end";
  EXPECT_EQ(got.amax_bits, amax);
  EXPECT_EQ(got.overflow, overflows);
}

std::vector<ConvertIsa> isas() {
  std::vector<ConvertIsa> out = {ConvertIsa::kAvx2};
  if (convert_isa_supported(ConvertIsa::kAvx512)) out.push_back(ConvertIsa::kAvx512);
  return out;
}

template <typename In>
void check_all(const char* in_name) {
  // Empty, shorter than a vector, around one block (256), several blocks with a ragged end, and enough for
  // every thread to take several runs of blocks.
  for (int64_t n : {0, 1, 7, 31, 255, 256, 257, 3 * 256 + 7, 100003}) {
    const std::vector<In> x = as<In>(awkward_values(n, static_cast<uint32_t>(n)));
    for (ConvertIsa isa : isas()) {
      for (Fp8Overflow overflow : {Fp8Overflow::kSaturate, Fp8Overflow::kNoSaturate}) {
        for (float scale : {1.0f, 3.7f, 1.0f / 1024.0f, 0.0f, kInf}) {
          expect_one_pass_equals_reference<Fp8E4M3Format>(in_name, x, scale, overflow, DType::kF8E4M3, isa);
          expect_one_pass_equals_reference<Fp8E5M2Format>(in_name, x, scale, overflow, DType::kF8E5M2, isa);
        }
      }
    }
  }
}

TEST(QuantizeFp8OnePass, EqualsTheReferenceArithmeticForF32Inputs) { check_all<float>("f32"); }
TEST(QuantizeFp8OnePass, EqualsTheReferenceArithmeticForF16Inputs) { check_all<Half>("f16"); }
TEST(QuantizeFp8OnePass, EqualsTheReferenceArithmeticForBf16Inputs) { check_all<BFloat16>("bf16"); }

TEST(QuantizeFp8OnePass, AmaxAloneEqualsTheReference) {
  for (int64_t n : {0, 1, 255, 257, 100003}) {
    const std::vector<float> x = awkward_values(n, 9);
    uint32_t want = 0;
    for (float v : x) want = std::max(want, std::bit_cast<uint32_t>(v) & 0x7fffffffu);
    EXPECT_EQ(cpu::amax_bits(x.data(), n), want) << "n " << n;
    const std::vector<Half> h = as<Half>(x);
    uint32_t want_h = 0;
    for (Half v : h) want_h = std::max(want_h, std::bit_cast<uint32_t>(static_cast<float>(v)) & 0x7fffffffu);
    EXPECT_EQ(cpu::amax_bits(h.data(), n), want_h) << "n " << n;
  }
}

// The sweep widens f16 with fp8::half_to_f32_bits (branch-free, so that it vectorizes): the bits of the scalar
// conversion (and F16C's) for every one of the 65536 patterns, nans included.
TEST(QuantizeFp8OnePass, BranchFreeHalfWideningMatchesTheScalarConversion) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint32_t want = std::bit_cast<uint32_t>(detail::half_bits_to_float(static_cast<uint16_t>(h)));
    ASSERT_EQ(fp8::half_to_f32_bits(static_cast<uint16_t>(h)), want) << "half 0x" << std::hex << h;
  }
}

}  // namespace
}  // namespace mantissa
