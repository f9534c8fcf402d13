// MXFP8 block scaling (amp/mx.h) against torchao 0.18's reference to_mx / to_dtype in tests/golden/mx.h5
// (scripts/golden/mx.py): every block's E8M0 scale, every element's bits and every dequantized value, for
// E4M3 and E5M2, over normal values, the whole f32 exponent range, blocks whose maximum sits on the scale's
// and the rounding's edges, zeros, f32 subnormals, infs and nans. Then what is refused.
#include "amp/mx.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/golden.h"

namespace mantissa::amp {
namespace {

constexpr int64_t kCols = 128;

// RCEIL: torchao takes ceil(log2(amax / max)) with an f32 log2, which rounds a quotient just above a power of two
// down onto it, one power below the exact rule's (mantissa's): such a block (its scale one above torchao's and
// log2f of the quotient an integer) is counted and its elements skipped.
void expect_as_torchao(const char* group, DType element, MxScaleRounding rounding = MxScaleRounding::kFloor) {
  testing::GoldenFile g("mx.h5");
  const std::vector<uint32_t> in = g.u32("/input");
  const std::vector<uint8_t> want_scales = g.u8(std::string("/") + group + "/scales");
  const std::vector<uint8_t> want_data = g.u8(std::string("/") + group + "/data");
  const std::vector<uint32_t> want_back = g.u32(std::string("/") + group + "/dequant");
  const int64_t rows = static_cast<int64_t>(in.size()) / kCols;
  ASSERT_GT(rows, 100);
  Tensor x = empty({rows, kCols});
  std::memcpy(x.data_ptr(), in.data(), in.size() * sizeof(uint32_t));
  const MxTensor q = quantize_mx(x, element, 32, rounding);
  const float element_max = element == DType::kF8E4M3 ? 448.0f : 57344.0f;
  std::vector<bool> log2_block(want_scales.size(), false);
  ASSERT_EQ(q.scales.shape(), (Shape{rows, kCols / 32}));
  ASSERT_EQ(static_cast<size_t>(q.scales.numel()), want_scales.size());
  int64_t bad_scales = 0, bad_data = 0, bad_back = 0, nan_blocks = 0;
  for (int64_t b = 0; b < q.scales.numel(); ++b) {
    const int32_t got = q.scales.data<int32_t>()[b];
    nan_blocks += got == 255;
    if (rounding == MxScaleRounding::kRceil && got == want_scales[b] + 1) {
      float amax = 0.0f;
      for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(std::bit_cast<float>(in[b * 32 + j])));
      const float l = std::log2(amax / element_max);
      log2_block[b] = l == std::floor(l) && static_cast<int>(l) + 127 == want_scales[b];
      if (log2_block[b]) continue;
    }
    if (got != want_scales[b] && ++bad_scales <= 5)
      ADD_FAILURE() << group << " block " << b << ": scale " << got << ", torchao " << int{want_scales[b]};
  }
  const auto* data = static_cast<const uint8_t*>(q.data.data_ptr());
  for (size_t i = 0; i < want_data.size(); ++i) {
    if (log2_block[i / 32]) continue;
    if (data[i] != want_data[i] && ++bad_data <= 5)
      ADD_FAILURE() << group << " element " << i << " (" << std::bit_cast<float>(in[i]) << "): 0x" << std::hex
                    << int{data[i]} << ", torchao 0x" << int{want_data[i]};
  }
  const Tensor back = dequantize_mx(q);
  for (size_t i = 0; i < want_back.size(); ++i) {
    const uint32_t got = std::bit_cast<uint32_t>(back.data<float>()[i]);
    if (log2_block[i / 32]) continue;
    const bool both_nan = std::isnan(std::bit_cast<float>(got)) && std::isnan(std::bit_cast<float>(want_back[i]));
    if (got != want_back[i] && !both_nan && ++bad_back <= 5)
      ADD_FAILURE() << group << " dequantized " << i << ": " << std::bit_cast<float>(got) << ", torchao "
                    << std::bit_cast<float>(want_back[i]);
  }
  EXPECT_EQ(bad_scales, 0) << "of " << want_scales.size();
  EXPECT_EQ(bad_data, 0) << "of " << want_data.size();
  EXPECT_EQ(bad_back, 0) << "of " << want_back.size();
  EXPECT_GE(nan_blocks, 2) << "the golden input has blocks with a nan";
  if (rounding == MxScaleRounding::kRceil)
    std::printf("  %s: %lld blocks where torchao's f32 log2 gave the scale below the exact rule's\n", group,
                static_cast<long long>(std::count(log2_block.begin(), log2_block.end(), true)));
}

TEST(Mx, E4M3MatchesTorchaoBitForBit) { expect_as_torchao("e4m3", DType::kF8E4M3); }
TEST(Mx, E5M2MatchesTorchaoBitForBit) { expect_as_torchao("e5m2", DType::kF8E5M2); }
TEST(Mx, E4M3RceilMatchesTorchaoBitForBit) { expect_as_torchao("e4m3_rceil", DType::kF8E4M3, MxScaleRounding::kRceil); }
TEST(Mx, E5M2RceilMatchesTorchaoBitForBit) { expect_as_torchao("e5m2_rceil", DType::kF8E5M2, MxScaleRounding::kRceil); }

// The scale rule on its own: the block maximum's power of two over the format's.
TEST(Mx, ScaleIsTheMaximumsPowerOfTwoOverTheFormats) {
  EXPECT_EQ(mx_scale_floor(1.0f, 8), 127 - 8);
  EXPECT_EQ(mx_scale_floor(448.0f, 8), 127);  // 448 = 1.75 x 2^8: scale 1
  EXPECT_EQ(mx_scale_floor(511.9f, 8), 127);  // still 2^8
  EXPECT_EQ(mx_scale_floor(512.0f, 8), 128);
  EXPECT_EQ(mx_scale_floor(57344.0f, 15), 127);
  EXPECT_EQ(mx_scale_floor(0.0f, 8), 0);  // clamped to 2^-127
  EXPECT_EQ(mx_scale_floor(std::nanf(""), 8), 255);
  EXPECT_EQ(mx_scale_floor(INFINITY, 8), 247);  // the exponent field of inf, as torchao reads it
}

TEST(Mx, Bf16InputIsItsF32Values) {
  Tensor x = empty({2, 64});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, i % 20 - 10);
  const Tensor xb = x.to(DType::kBF16);
  const MxTensor a = quantize_mx(xb.to(DType::kF32), DType::kF8E4M3), b = quantize_mx(xb, DType::kF8E4M3);
  EXPECT_EQ(std::memcmp(a.data.data_ptr(), b.data.data_ptr(), a.data.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.scales.data_ptr(), b.scales.data_ptr(), a.scales.nbytes()), 0);
}

TEST(Mx, RefusesRaggedBlocksOtherElementsAndDtypes) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::pair<std::function<void()>, const char*> cases[] = {
      {[] {
         quantize_mx(zeros({4, 48}), DType::kF8E4M3, 32);
       },
       "the last dimension of [4, 48] is not a multiple of block_size 32"},
      {[] {
         quantize_mx(zeros({4, 32}), DType::kBF16, 32);
       },
       "element must be f8e4m3 or f8e5m2"},
      {[] {
         quantize_mx(zeros({4, 32}, {.dtype = DType::kF64}), DType::kF8E4M3, 32);
       },
       "x must be a CPU f32 or bf16 tensor, got f64"},
      {[] {
         quantize_mx(zeros({4, 32}), DType::kF8E4M3, 0);
       },
       "block_size must be positive"},
  };
  for (const auto& [call, text] : cases) EXPECT_NE(message(call).find(text), std::string::npos) << text;
}

}  // namespace
}  // namespace mantissa::amp
