// The vectorized bulk converters (framework/convert.h) of every instruction set this CPU supports against
// the scalar Half/BFloat16 path, bit for bit, nan payloads included: on every f32 bit pattern, on
// every length 0..67 (the scalar tails) and through convert(), which copy_ and to() use.
#include "framework/convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace mantissa {
namespace {

std::vector<ConvertIsa> vector_isas() {
  std::vector<ConvertIsa> out;
  for (ConvertIsa isa : {ConvertIsa::kAvx2, ConvertIsa::kAvx512}) {
    if (convert_isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

// Converts blocks of f32 bit patterns with the scalar path once and with every vector instruction set,
// and finds the first f32 -> f16 or f32 -> bf16 result that differs. Buffers are kept between blocks.
class F32Checker {
 public:
  explicit F32Checker(size_t capacity) : h_ref_(capacity), h_vec_(capacity), b_ref_(capacity), b_vec_(capacity) {}

  // Returns "" when every instruction set agrees with the scalar path on `in`, else what differs.
  std::string check(const uint32_t* in, int64_t n) {
    const auto* src = reinterpret_cast<const float*>(in);
    const ConvertKernels& ref = convert_kernels(ConvertIsa::kScalar);
    ref.f32_to_f16(src, h_ref_.data(), n);
    ref.f32_to_bf16(src, b_ref_.data(), n);
    for (ConvertIsa isa : vector_isas()) {
      convert_kernels(isa).f32_to_f16(src, h_vec_.data(), n);
      convert_kernels(isa).f32_to_bf16(src, b_vec_.data(), n);
      if (std::memcmp(h_ref_.data(), h_vec_.data(), n * sizeof(Half)) == 0 &&
          std::memcmp(b_ref_.data(), b_vec_.data(), n * sizeof(BFloat16)) == 0) {
        continue;
      }
      for (int64_t i = 0; i < n; ++i) {
        if (h_vec_[i].bits != h_ref_[i].bits || b_vec_[i].bits != b_ref_[i].bits) {
          std::ostringstream os;
          os << convert_isa_name(isa) << " differs at input bits 0x" << std::hex << in[i] << ": f16 0x"
             << h_vec_[i].bits << " vs 0x" << h_ref_[i].bits << ", bf16 0x" << b_vec_[i].bits << " vs 0x"
             << b_ref_[i].bits;
          return os.str();
        }
      }
    }
    return "";
  }

 private:
  std::vector<Half> h_ref_, h_vec_;
  std::vector<BFloat16> b_ref_, b_vec_;
};

TEST(Convert, BestIsaIsSupportedAndUsed) {
  const ConvertIsa best = convert_isa();
  EXPECT_TRUE(convert_isa_supported(best));
  EXPECT_TRUE(convert_isa_supported(ConvertIsa::kScalar));
  // The library's baseline is x86-64-v3, so at least the AVX2/F16C kernels must be chosen.
  EXPECT_NE(best, ConvertIsa::kScalar);
  if (convert_isa_supported(ConvertIsa::kAvx512)) {
    EXPECT_EQ(best, ConvertIsa::kAvx512);
  }
}

TEST(Convert, Every16BitPatternToF32MatchesScalar) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> ref_h(65536), ref_b(65536);
  convert_kernels(ConvertIsa::kScalar).f16_to_f32(reinterpret_cast<const Half*>(all.data()), ref_h.data(), 65536);
  convert_kernels(ConvertIsa::kScalar).bf16_to_f32(reinterpret_cast<const BFloat16*>(all.data()), ref_b.data(), 65536);
  for (ConvertIsa isa : vector_isas()) {
    std::vector<float> h(65536), b(65536);
    convert_kernels(isa).f16_to_f32(reinterpret_cast<const Half*>(all.data()), h.data(), 65536);
    convert_kernels(isa).bf16_to_f32(reinterpret_cast<const BFloat16*>(all.data()), b.data(), 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(h[i]), std::bit_cast<uint32_t>(ref_h[i]))
          << convert_isa_name(isa) << " f16 " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(b[i]), std::bit_cast<uint32_t>(ref_b[i]))
          << convert_isa_name(isa) << " bf16 " << i;
    }
  }
}

// Every sign and exponent, with mantissas at and around both rounding points (bit 13 for f16, bit 16
// for bf16: ties, one below, one above, odd and even kept bits), plus nan payloads in every position.
TEST(Convert, StructuredF32PatternsMatchScalar) {
  std::vector<uint32_t> in;
  const uint32_t lows[] = {0x0,    0x1,    0xfff,  0x1000, 0x1001,  0x1fff,  0x2000,  0x3000,
                           0x7fff, 0x8000, 0x8001, 0xffff, 0x10000, 0x18000, 0x17fff, 0x18001};
  const uint32_t highs[] = {0x0, 0x7e0000, 0x7f0000, 0x7fe000, 0x400000, 0x2aa000, 0x554000, 0x7fffff};
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exp = 0; exp < 256; ++exp) {
      for (uint32_t hi : highs) {
        for (uint32_t lo : lows) in.push_back((sign << 31) | (exp << 23) | ((hi | lo) & 0x7fffffu));
      }
    }
  }
  F32Checker checker(in.size());
  EXPECT_EQ(checker.check(in.data(), static_cast<int64_t>(in.size())), "");
}

// 2^24 random bit patterns (all exponents, nans and subnormals included).
TEST(Convert, RandomF32PatternsMatchScalar) {
  std::mt19937 rng(2024);
  std::vector<uint32_t> in(size_t{1} << 24);
  for (auto& v : in) v = rng();
  F32Checker checker(in.size());
  EXPECT_EQ(checker.check(in.data(), static_cast<int64_t>(in.size())), "");
}

// All 2^32 f32 bit patterns. The scalar reference makes this take about 30 s of CPU here, too long for
// every run: run it with --gtest_also_run_disabled_tests after touching a converter.
TEST(Convert, DISABLED_AllF32PatternsMatchScalar) {
  constexpr int64_t kBlock = int64_t{1} << 22;
  std::vector<uint32_t> in(kBlock);
  F32Checker checker(kBlock);
  for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kBlock) {
    for (int64_t i = 0; i < kBlock; ++i) in[i] = static_cast<uint32_t>(base + i);
    ASSERT_EQ(checker.check(in.data(), kBlock), "");
  }
}

// Lengths 0..67 from unaligned starts: the vector body and the scalar tail both agree with the scalar
// path, and nothing past n is written.
TEST(Convert, EveryLengthAndOffsetMatchesScalar) {
  std::mt19937 rng(7);
  std::vector<uint32_t> pool(80);
  for (auto& v : pool) v = rng();
  pool[3] = 0x7f800001u;   // a signalling nan
  pool[9] = 0x00000001u;   // the smallest subnormal
  pool[20] = 0x477ff000u;  // 65520: f16 overflow
  const auto* fpool = reinterpret_cast<const float*>(pool.data());
  constexpr uint16_t kSentinel = 0xabcd;
  for (ConvertIsa isa : vector_isas()) {
    const ConvertKernels& vec = convert_kernels(isa);
    for (int64_t start = 0; start < 4; ++start) {
      for (int64_t n = 0; n <= 67; ++n) {
        const float* src = fpool + start;  // pool has 80 >= 3 + 67 entries
        std::vector<Half> h(static_cast<size_t>(n) + 1, Half::from_bits(kSentinel));
        std::vector<BFloat16> b(static_cast<size_t>(n) + 1, BFloat16::from_bits(kSentinel));
        vec.f32_to_f16(src, h.data(), n);
        vec.f32_to_bf16(src, b.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(h[i].bits, Half(src[i]).bits) << convert_isa_name(isa) << " n=" << n << " i=" << i;
          ASSERT_EQ(b[i].bits, BFloat16(src[i]).bits) << convert_isa_name(isa) << " n=" << n << " i=" << i;
        }
        ASSERT_EQ(h[n].bits, kSentinel) << "wrote past the end, n=" << n;
        ASSERT_EQ(b[n].bits, kSentinel) << "wrote past the end, n=" << n;

        std::vector<float> back_h(static_cast<size_t>(n) + 1, -7.0f), back_b(static_cast<size_t>(n) + 1, -7.0f);
        vec.f16_to_f32(h.data(), back_h.data(), n);
        vec.bf16_to_f32(b.data(), back_b.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(back_h[i]), std::bit_cast<uint32_t>(static_cast<float>(h[i])));
          ASSERT_EQ(std::bit_cast<uint32_t>(back_b[i]), std::bit_cast<uint32_t>(static_cast<float>(b[i])));
        }
        ASSERT_EQ(back_h[n], -7.0f);
        ASSERT_EQ(back_b[n], -7.0f);
      }
    }
  }
}

// convert() splits long arrays over threads; the result is the same as one scalar pass.
TEST(Convert, LongArraysThroughConvertAndTo) {
  const int64_t n = (int64_t{1} << 20) + 13;
  std::mt19937 rng(11);
  std::vector<uint32_t> in(static_cast<size_t>(n));
  for (auto& v : in) v = rng();
  const auto* src = reinterpret_cast<const float*>(in.data());
  std::vector<Half> h(in.size());
  std::vector<BFloat16> b(in.size());
  convert(src, h.data(), n);
  convert(src, b.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i].bits, Half(src[i]).bits) << i;
    ASSERT_EQ(b[i].bits, BFloat16(src[i]).bits) << i;
  }
  // Tensor::to() goes through convert() for contiguous f32 <-> f16/bf16.
  std::vector<float> values(src, src + 1000);
  const Tensor t = from_vector<float>(values);
  const Tensor th = t.to(DType::kF16);
  const Tensor tb = t.to(DType::kBF16);
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(th.data<Half>()[i].bits, h[i].bits);
    ASSERT_EQ(tb.data<BFloat16>()[i].bits, b[i].bits);
  }
}

TEST(Convert, UnsupportedIsaIsAnError) {
  if (convert_isa_supported(ConvertIsa::kAvx512)) GTEST_SKIP() << "this CPU has AVX-512";
  EXPECT_THROW(convert_kernels(ConvertIsa::kAvx512), Error);
}

}  // namespace
}  // namespace mantissa
