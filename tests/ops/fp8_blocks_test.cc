// Block-scaled quantization, the Hadamard transform and the block-scaled GEMM (ops/fp8/blocks.h):
// - FP4 against torchao 0.18 bit for bit (tests/golden/fp4.h5, scripts/golden/fp4.py): the E2M1 cast, MXFP4 (FLOOR)
//   and NVFP4 with and without a per-tensor scale, dynamic and calibrated: every block scale, every element and
//   every dequantized value;
// - the f32 scale rules (torchao's amax_to_scale, rounded to powers of two) and the 128x128 tiles;
// - stochastic rounding: unbiased, up with probability proportional to the distance, replayed bit for bit;
// - the Hadamard transform: orthogonal, and the matrix it claims to apply;
// - block_scaled_mm against a double-precision reference, equal to scaled_mm's block path at width 128, and its
//   ragged last block; and what is refused, by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "framework/error.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/fp8/accumulator.h"
#include "ops/fp8/blocks.h"
#include "ops/fp8/fp8.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

bool same_bits_or_both_nan(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

Tensor f32_tensor(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t = empty({rows, cols});
  std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(float));
  return t;
}

// The E4M3 bytes of a quantized tensor decoded: E2M1 values are stored as the E4M3 bytes of their values.
std::vector<float> values_of(const Tensor& data) {
  const Tensor f = data.to(DType::kF32).contiguous();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

TEST(Fp4Golden, E2M1CastMatchesTorchao) {
  testing::GoldenFile g("fp4.h5");
  const std::vector<float> in = g.f32("/e2m1/cast/input"), want = g.f32("/e2m1/cast/value");
  const std::vector<uint8_t> codes = g.u8("/e2m1/cast/code");
  ASSERT_GT(in.size(), 2000u);
  int64_t bad = 0, nans = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {  // torchao gives a nan a finite code from its payload; ours stays nan (never reached
      ++nans;                 // inside MX or NVFP4: a nan's block has a nan scale)
      EXPECT_TRUE(std::isnan(fp8::round_e2m1(in[i])));
      continue;
    }
    const float got = fp8::round_e2m1(in[i]);
    if ((std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want[i]) || fp8::e2m1_code(got) != codes[i]) &&
        ++bad <= 5)
      ADD_FAILURE() << "E2M1(" << in[i] << ") = " << got << ", torchao " << want[i] << " (code " << int{codes[i]}
                    << ")";
  }
  EXPECT_EQ(bad, 0) << "of " << in.size();
  EXPECT_GT(nans, 0);
  // Every code decodes as torchao's table, and each value is exactly an E4M3 value (how it is stored).
  const std::vector<uint8_t> all = g.u8("/e2m1/decode/code");
  const std::vector<float> decoded = g.f32("/e2m1/decode/value");
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(fp8::e2m1_code(decoded[i]), all[i]);
    EXPECT_EQ(float(Float8E4M3(decoded[i])), decoded[i]);
  }
}

struct Mismatches {
  int64_t scales = 0, elements = 0, dequant = 0, compared = 0;
  int64_t log2_blocks = 0;  // RCEIL: blocks where torchao's f32 log2 rounded onto a power of two
};

// One torchao case: `prefix` holds the quantization's scale, elements and dequant, `input` its input.
Mismatches compare_case(const testing::GoldenFile& g, const std::string& input_path, const std::string& prefix,
                        const BlockQuantOptions& options, int64_t block) {
  const Shape shape = g.shape(input_path);
  const int64_t rows = shape[0], cols = shape[1];
  Tensor x = f32_tensor(g.f32(input_path), rows, cols);
  if (g.has(input_path + "_bf16")) {  // the bf16 case: quantized from the bf16 tensor itself
    const std::vector<uint16_t> bits = g.u16(input_path + "_bf16");
    x = empty({rows, cols}, {.dtype = DType::kBF16});
    std::memcpy(x.data_ptr(), bits.data(), bits.size() * sizeof(uint16_t));
  }
  const BlockQuantized q = quantize_blocks(x, options);
  const std::vector<uint8_t> want_scale = g.u8(prefix + "/scale");
  const std::vector<float> want_elements = g.f32(prefix + "/elements"), want_dequant = g.f32(prefix + "/dequant");
  Mismatches m;
  const int32_t* scale = q.scale_bits.data<int32_t>();
  std::vector<bool> nan_block(want_scale.size());
  for (size_t b = 0; b < want_scale.size(); ++b) {
    const bool nan_scale =
        options.rule == BlockScaleRule::kNvfp4 ? (want_scale[b] & 0x7f) == 0x7f : want_scale[b] == 255;
    nan_block[b] = nan_scale;
    // A nan's sign in the E4M3 byte depends on which nan reached the cast: any nan scale matches any other.
    bool ok =
        scale[b] == want_scale[b] || (nan_scale && options.rule == BlockScaleRule::kNvfp4 && (scale[b] & 0x7f) == 0x7f);
    if (!ok && options.rule == BlockScaleRule::kE8M0Rceil && scale[b] == want_scale[b] + 1) {
      // torchao takes ceil(log2(amax / 6)) with an f32 log2, which rounds a quotient just above a power of two
      // down onto it: the scale one power lower than the exact rule's. Such a block is counted and skipped.
      const Tensor xf = x.to(DType::kF32);
      const int64_t per_row = cols / block, r = static_cast<int64_t>(b) / per_row,
                    c0 = (static_cast<int64_t>(b) % per_row) * block;
      float amax = 0.0f;
      for (int64_t j = c0; j < c0 + block; ++j) amax = std::max(amax, std::fabs(xf.data<float>()[r * cols + j]));
      const float rounded_log2 = std::log2(amax / 6.0f);
      if (rounded_log2 == std::floor(rounded_log2) && static_cast<int>(rounded_log2) + 127 == want_scale[b]) {
        ok = true;
        nan_block[b] = true;
        ++m.log2_blocks;
      }
    }
    if (!ok && ++m.scales <= 3)
      ADD_FAILURE() << prefix << " block " << b << ": scale " << scale[b] << ", torchao " << int{want_scale[b]};
  }
  const std::vector<float> got = values_of(q.data);
  const Tensor back = dequantize_blocks(q, 1, block);
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t b = (i / static_cast<size_t>(cols)) * static_cast<size_t>(cols / block) + (i % cols) / block;
    if (nan_block[b])
      continue;  // its elements depend on the nan's payload (fp4_spec: skip them), or its scale
                 // on torchao's log2 (above)
    ++m.compared;
    if (!same_bits_or_both_nan(got[i], want_elements[i]) && ++m.elements <= 3)
      ADD_FAILURE() << prefix << " element " << i << ": " << got[i] << ", torchao " << want_elements[i];
    if (!same_bits_or_both_nan(back.data<float>()[i], want_dequant[i]) && ++m.dequant <= 3)
      ADD_FAILURE() << prefix << " dequantized " << i << ": " << back.data<float>()[i] << ", torchao "
                    << want_dequant[i];
  }
  return m;
}

// Every MXFP4 case under one scale rule: its mismatches fail the test; returns the blocks compare_case skipped
// for torchao's f32 log2 (RCEIL only).
int64_t expect_mxfp4_cases(const char* mode, BlockScaleRule rule) {
  testing::GoldenFile g("fp4.h5");
  int64_t compared = 0, log2_blocks = 0;
  for (const std::string& c : g.members("/mxfp4")) {
    SCOPED_TRACE(c + " " + mode);
    const Mismatches m = compare_case(g, "/mxfp4/" + c + "/input", "/mxfp4/" + c + "/" + mode,
                                      {.element = BlockElement::kE2M1, .rule = rule, .block_cols = 32}, 32);
    EXPECT_EQ(m.scales + m.elements + m.dequant, 0);
    compared += m.compared;
    log2_blocks += m.log2_blocks;
  }
  EXPECT_GT(compared, 10000);
  return log2_blocks;
}

TEST(Fp4Golden, Mxfp4MatchesTorchaoBitForBit) { EXPECT_EQ(expect_mxfp4_cases("floor", BlockScaleRule::kE8M0), 0); }

// RCEIL: the E8M0 scale rounded up (cuBLAS's and Blackwell's rule), torchao's ScaleCalculationMode.RCEIL.
TEST(Fp4Golden, Mxfp4RceilMatchesTorchaoBitForBit) {
  const int64_t log2_blocks = expect_mxfp4_cases("rceil", BlockScaleRule::kE8M0Rceil);
  std::printf("  %lld blocks where torchao's f32 log2 gave the scale below the exact RCEIL rule's\n",
              static_cast<long long>(log2_blocks));
}

// The exact RCEIL rule (what cvt.rp.satfinite.ue8m0 computes): a power-of-two quotient keeps its exponent, one bit
// above it rounds up, zero and the subnormals clamp at 2^-127, inf and nan are 254 and 255.
TEST(MxScale, RceilRoundsTheQuotientUpExactly) {
  const float m = 448.0f;
  EXPECT_EQ(fp8::mx_scale_rceil(448.0f, m), 127);                             // 2^0
  EXPECT_EQ(fp8::mx_scale_rceil(std::nextafter(448.0f, 1e9f), m), 128);       // just above: 2^1
  EXPECT_EQ(fp8::mx_scale_rceil(224.0f, m), 126);                             // 2^-1
  EXPECT_EQ(fp8::mx_scale_rceil(300.0f, m), 127);                             // 0.67 -> 2^0
  EXPECT_EQ(fp8::mx_scale_rceil(0.0f, m), 0);                                 // clamped at 2^-127
  EXPECT_EQ(fp8::mx_scale_rceil(std::ldexp(448.0f, -130), m), 0);             // subnormal quotient
  EXPECT_EQ(fp8::mx_scale_rceil(std::ldexp(448.0f, -126), m), 1);             // 2^-126
  EXPECT_EQ(fp8::mx_scale_rceil(std::numeric_limits<float>::max(), m), 247);  // 2^128 / 448: 2^120
  EXPECT_EQ(fp8::mx_scale_rceil(std::numeric_limits<float>::infinity(), m), 254);
  EXPECT_EQ(fp8::mx_scale_rceil(std::numeric_limits<float>::quiet_NaN(), m), 255);
  // A block of 500 under E4M3: RCEIL scales by 2^1 (500 / 448 rounds up), FLOOR by 2^0 (and saturates 500 to 448).
  const BlockQuantized up =
      quantize_blocks(f32_tensor({500.0f, 1.0f}, 1, 2),
                      {.element = BlockElement::kE4M3, .rule = BlockScaleRule::kE8M0Rceil, .block_cols = 32});
  EXPECT_EQ(up.scale_bits.data<int32_t>()[0], 128);
  EXPECT_EQ(up.overflow.item(), 0);
  EXPECT_EQ(values_of(up.data)[0], 256.0f);  // 250, rounded to E4M3
}

TEST(Fp4Golden, Nvfp4MatchesTorchaoBitForBit) {
  testing::GoldenFile g("fp4.h5");
  int64_t compared = 0, variants = 0;
  for (const std::string& c : g.members("/nvfp4")) {
    for (const std::string& v : g.members("/nvfp4/" + c)) {
      if (!g.has("/nvfp4/" + c + "/" + v + "/scale")) continue;  // the datasets, not a variant
      // torchao's eager code turns an all-zero tensor into nans (0 / 0); ours takes P = 1 there, as
      // Transformer Engine does (ops/fp8/block_math.h), and is checked to give zeros below.
      if (c == "all_zero" && v == "dyn") continue;
      SCOPED_TRACE(c + "/" + v);
      const std::string prefix = "/nvfp4/" + c + "/" + v;
      BlockQuantOptions o{.element = BlockElement::kE2M1,
                          .rule = BlockScaleRule::kNvfp4,
                          .block_cols = 16,
                          .tensor_scale = v != "none"};
      if (v != "none" && v != "dyn") o.tensor_scale_inv = scalar_tensor(g.f32(prefix + "/per_tensor_scale")[0]);
      const Mismatches m = compare_case(g, "/nvfp4/" + c + "/input", prefix, o, 16);
      EXPECT_EQ(m.scales + m.elements + m.dequant, 0);
      if (v == "dyn") {  // the per-tensor scale the op computed
        const Shape shape = g.shape("/nvfp4/" + c + "/input");
        const BlockQuantized q = quantize_blocks(f32_tensor(g.f32("/nvfp4/" + c + "/input"), shape[0], shape[1]), o);
        EXPECT_TRUE(same_bits_or_both_nan(q.tensor_scale_inv.item<float>(), g.f32(prefix + "/per_tensor_scale")[0]));
      }
      compared += m.compared;
      ++variants;
    }
  }
  EXPECT_GE(variants, 20);
  EXPECT_GT(compared, 8000);
  // The all-zero tensor: zeros back, and P = 1.
  const BlockQuantized z = quantize_blocks(
      zeros({2, 32}), {.element = BlockElement::kE2M1, .rule = BlockScaleRule::kNvfp4, .block_cols = 16});
  EXPECT_EQ(z.tensor_scale_inv.item<float>(), 1.0f);
  for (float v : values_of(dequantize_blocks(z, 1, 16))) EXPECT_EQ(v, 0.0f);
}

// torchao's amax_to_scale: 448 / clamp(amax, 1e-12) in f64, rounded to f32; pow2 rounds it down.
TEST(BlockQuant, F32ScalesAreTorchaosAndPow2RoundsDown) {
  Generator gen(3);
  const Tensor x = randn({8, 256}, {}, &gen) * 3.0;
  for (bool pow2 : {false, true}) {
    const BlockQuantized q =
        quantize_blocks(x, {.rule = pow2 ? BlockScaleRule::kF32Pow2 : BlockScaleRule::kF32, .block_cols = 128});
    ASSERT_EQ(q.scale_inv.shape(), (Shape{8, 2}));
    EXPECT_FALSE(q.scale_bits.defined());
    for (int64_t r = 0; r < 8; ++r) {
      for (int64_t b = 0; b < 2; ++b) {
        double amax = 0;
        for (int64_t j = 0; j < 128; ++j)
          amax = std::max(amax, std::fabs(double(x.data<float>()[r * 256 + b * 128 + j])));
        float scale = static_cast<float>(448.0 / amax);
        if (pow2) scale = std::exp2(std::floor(std::log2(scale)));
        EXPECT_EQ(q.scale_inv.data<float>()[r * 2 + b], 1.0f / scale);
        for (int64_t j = 0; j < 128; ++j) {
          const int64_t i = r * 256 + b * 128 + j;
          EXPECT_EQ(static_cast<const uint8_t*>(q.data.data_ptr())[i], Float8E4M3(x.data<float>()[i] * scale).bits);
        }
      }
    }
  }
}

TEST(BlockQuant, SquareTilesShareOneScaleAndRaggedEdgesScaleWhatTheyHold) {
  Tensor x = ones({130, 20});
  x.data<float>()[129 * 20 + 19] = 100.0f;  // in the last (ragged) tile row only
  const BlockQuantized q = quantize_blocks(x, {.block_rows = 128, .block_cols = 16});
  ASSERT_EQ(q.scale_inv.shape(), (Shape{2, 2}));
  EXPECT_EQ(q.scale_inv.data<float>()[0], 1.0f / 448.0f);
  EXPECT_EQ(q.scale_inv.data<float>()[1], 1.0f / 448.0f);
  EXPECT_EQ(q.scale_inv.data<float>()[2], 1.0f / 448.0f);
  EXPECT_EQ(q.scale_inv.data<float>()[3], static_cast<float>(1.0 / static_cast<float>(448.0 / 100.0)));
  const Tensor back = dequantize_blocks(q, 128, 16);
  EXPECT_NEAR(back.data<float>()[129 * 20 + 19], 100.0f, 4.0f);
  EXPECT_EQ(q.amax.item<float>(), 100.0f);
}

// Column tiles (b x 1: the weight gradient's scaling along the batch, read row by row) are the row tiles of the
// transpose, bit for bit, for every rule; stochastic rounding draws by the element's own index, so it differs.
TEST(BlockQuant, ColumnTilesAreTheTransposesRowTiles) {
  Generator gen(8);
  const Tensor x = randn({70, 24}, {}, &gen);  // 70: two blocks of 32 and a ragged 6
  for (const BlockQuantOptions& o :
       {BlockQuantOptions{.rule = BlockScaleRule::kF32}, BlockQuantOptions{.rule = BlockScaleRule::kF32Pow2},
        BlockQuantOptions{.rule = BlockScaleRule::kE8M0},
        BlockQuantOptions{.element = BlockElement::kE2M1, .rule = BlockScaleRule::kNvfp4},
        BlockQuantOptions{.element = BlockElement::kE2M1, .rule = BlockScaleRule::kE8M0}}) {
    BlockQuantOptions rows = o, cols = o;
    rows.block_rows = 1;
    rows.block_cols = 32;
    cols.block_rows = 32;
    cols.block_cols = 1;
    const BlockQuantized a = quantize_blocks(x.t().contiguous(), rows), b = quantize_blocks(x, cols);
    ASSERT_EQ(b.scale_inv.shape(), (Shape{3, 24}));
    const Tensor bt = b.data.t().contiguous(), st = b.scale_inv.t().contiguous();
    EXPECT_EQ(std::memcmp(a.data.data_ptr(), bt.data_ptr(), 70 * 24), 0);
    EXPECT_EQ(std::memcmp(a.scale_inv.data_ptr(), st.data_ptr(), 3 * 24 * sizeof(float)), 0);
    EXPECT_EQ(a.overflow.item(), b.overflow.item());
    EXPECT_EQ(a.underflow.item(), b.underflow.item());
  }
}

TEST(BlockQuant, CountsOverflowAndUnderflow) {
  // MXFP8 E4M3: a block whose max is 500 gets scale 2^0 (floor(log2 500) - 8 = 0): 500 saturates to 448; 2^-12
  // is below E4M3's smallest subnormal (2^-9) at that scale and becomes 0.
  Tensor x = zeros({1, 32});
  x.data<float>()[0] = 500.0f;
  x.data<float>()[1] = std::ldexp(1.0f, -12);
  const BlockQuantized q = quantize_blocks(x, {.rule = BlockScaleRule::kE8M0, .block_cols = 32});
  EXPECT_EQ(q.scale_bits.data<int32_t>()[0], 127);
  EXPECT_EQ(q.overflow.item<int64_t>(), 1);
  EXPECT_EQ(q.underflow.item<int64_t>(), 1);
}

// Stochastic rounding to E2M1: the mean of many roundings is the value (within the statistical bound), the chance
// of rounding up is the distance over the step, and a (seed, offset) replays bit for bit.
TEST(BlockQuant, StochasticRoundingIsUnbiasedAndReplays) {
  constexpr int64_t kN = 1 << 16;
  for (float v : {0.3f, 1.1f, 2.75f, 4.5f, 5.9f, -0.7f}) {
    const float step = std::fabs(v) < 2 ? 0.5f : (std::fabs(v) < 4 ? 1.0f : 2.0f);
    const float lower = std::floor(std::fabs(v) / step) * step;
    const double p_up = (std::fabs(v) - lower) / step;
    double sum = 0;
    int64_t up = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const float r = fp8::round_e2m1_stochastic(v, fp8::rounding_bits(7, 3, static_cast<uint64_t>(i)));
      sum += r;
      up += std::fabs(r) > lower;
      ASSERT_TRUE(std::fabs(r) == lower || std::fabs(r) == lower + step) << v << " -> " << r;
    }
    // The mean's standard error is step * sqrt(p (1 - p) / n): allow 5 of them.
    const double se = step * std::sqrt(p_up * (1 - p_up) / kN);
    EXPECT_NEAR(sum / kN, v, 5 * se + 1e-7) << v;
    EXPECT_NEAR(static_cast<double>(up) / kN, p_up, 5 * std::sqrt(p_up * (1 - p_up) / kN) + 1e-7) << v;
  }
  // Saturation and exact values never move.
  EXPECT_EQ(fp8::round_e2m1_stochastic(7.0f, 0xffffffffu), 6.0f);
  EXPECT_EQ(fp8::round_e2m1_stochastic(1.5f, 0xffffffffu), 1.5f);
  // The op: the same seed and offset give the same bytes; another offset other bytes.
  Generator gen(5);
  const Tensor g = randn({64, 64}, {}, &gen);
  const BlockQuantOptions o{.element = BlockElement::kE2M1,
                            .rule = BlockScaleRule::kNvfp4,
                            .block_cols = 16,
                            .stochastic = true,
                            .seed = 11,
                            .offset = 4};
  const BlockQuantized a = quantize_blocks(g, o), b = quantize_blocks(g, o);
  BlockQuantOptions other = o;
  other.offset = 5;
  const BlockQuantized c = quantize_blocks(g, other);
  EXPECT_EQ(std::memcmp(a.data.data_ptr(), b.data.data_ptr(), 64 * 64), 0);
  EXPECT_NE(std::memcmp(a.data.data_ptr(), c.data.data_ptr(), 64 * 64), 0);
}

TEST(Hadamard16, IsTheSignedSylvesterMatrixOverFourAndOrthogonal) {
  Generator gen(9);
  const Tensor signs = hadamard16_signs(4);
  const Tensor a = randn({3, 37}, {}, &gen), b = randn({5, 37}, {}, &gen);  // 37: two blocks and a tail of 5
  const Tensor ha = hadamard16(a, signs), hb = hadamard16(b, signs);
  // One row against H = diag(s) H16 / 4, H16[i][j] = (-1)^popcount(i & j), in double.
  for (int64_t c0 : {0, 16}) {
    for (int j = 0; j < 16; ++j) {
      double want = 0;
      for (int i = 0; i < 16; ++i)
        want +=
            double(a.data<float>()[c0 + i]) * signs.data<float>()[i] * (std::popcount(unsigned(i & j)) % 2 ? -1 : 1);
      EXPECT_NEAR(ha.data<float>()[c0 + j], want / 4, 1e-5);
    }
  }
  for (int64_t j = 32; j < 37; ++j) EXPECT_EQ(ha.data<float>()[j], a.data<float>()[j]);  // the tail as it was
  // (a H)(b H)^T = a b^T.
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 5; ++k) {
      double plain = 0, rotated = 0;
      for (int64_t j = 0; j < 37; ++j) {
        plain += double(a.data<float>()[i * 37 + j]) * b.data<float>()[k * 37 + j];
        rotated += double(ha.data<float>()[i * 37 + j]) * hb.data<float>()[k * 37 + j];
      }
      EXPECT_NEAR(rotated, plain, 1e-4);
    }
  for (int j = 0; j < 16; ++j) EXPECT_EQ(std::fabs(signs.data<float>()[j]), 1.0f);
}

// a [M, K] and b [K, N] quantized along K, then block_scaled_mm against the dequantized operands' product in
// double: each block's products are exact in f32 and summed there, so the error is a few f32 roundings.
TEST(BlockScaledMm, MatchesTheDequantizedProductAndScaledMmsBlockPath) {
  Generator gen(2);
  for (int64_t k : {256, 200}) {  // 200: a ragged last block of 72
    SCOPED_TRACE(k);
    const int64_t m = 24, n = 40;
    const Tensor x = randn({m, k}, {}, &gen), w = randn({n, k}, {}, &gen) * 0.1;
    // f32 scales: each block summed, then scaled; E8M0 scales fold into the operands exactly: one sum over K.
    for (const auto& [block, rule] :
         {std::pair{int64_t{128}, BlockScaleRule::kF32}, std::pair{int64_t{32}, BlockScaleRule::kF32},
          std::pair{int64_t{16}, BlockScaleRule::kF32}, std::pair{int64_t{32}, BlockScaleRule::kE8M0},
          std::pair{int64_t{16}, BlockScaleRule::kE8M0}}) {
      const BlockQuantized qa = quantize_blocks(x, {.rule = rule, .block_cols = block});
      const BlockQuantized qb = quantize_blocks(w, {.rule = rule, .block_cols = block});
      const Tensor out = block_scaled_mm(qa.data, qb.data.t(), qa.scale_inv, qb.scale_inv.t(), {.block_k = block});
      const Tensor da = dequantize_blocks(qa, 1, block), db = dequantize_blocks(qb, 1, block);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double want = 0, mag = 0;
          for (int64_t l = 0; l < k; ++l) {
            want += double(da.data<float>()[i * k + l]) * db.data<float>()[j * k + l];
            mag += std::fabs(double(da.data<float>()[i * k + l]) * db.data<float>()[j * k + l]);
          }
          ASSERT_NEAR(out.data<float>()[i * n + j], want, 1e-6 * mag + 1e-30) << block << " " << i << "," << j;
        }
      if (block == 128 && k % 128 == 0) {  // the very bits of scaled_mm's DeepSeek-V3 layout
        const Tensor ref = scaled_mm(qa.data, qb.data.t(), qa.scale_inv, qb.scale_inv.t(), DType::kF32);
        EXPECT_EQ(std::memcmp(ref.data_ptr(), out.data_ptr(), m * n * sizeof(float)), 0);
      }
    }
  }
}

TEST(BlockScaledMm, AlphaAndBiasAndOutDtype) {
  Generator gen(4);
  const Tensor x = randn({8, 64}, {}, &gen), w = randn({16, 64}, {}, &gen);
  const BlockQuantized qa = quantize_blocks(x, {.block_cols = 32}), qb = quantize_blocks(w, {.block_cols = 32});
  const Tensor plain = block_scaled_mm(qa.data, qb.data.t(), qa.scale_inv, qb.scale_inv.t(), {.block_k = 32});
  const Tensor bias = randn({16}, {}, &gen);
  const Tensor scaled =
      block_scaled_mm(qa.data, qb.data.t(), qa.scale_inv, qb.scale_inv.t(),
                      {.block_k = 32, .out_dtype = DType::kBF16, .bias = bias, .alpha = scalar_tensor(0.5f)});
  ASSERT_EQ(scaled.dtype(), DType::kBF16);
  for (int64_t i = 0; i < 8 * 16; ++i) {
    const float want = std::fmaf(plain.data<float>()[i], 0.5f, bias.data<float>()[i % 16]);
    EXPECT_EQ(float(scaled.data<BFloat16>()[i]), float(BFloat16(want)));
  }
}

// Blackwell's block-scaled GEMM reads its scales in cuBLASLt's tiled layout (ops/fp8/block_math.h). torchao's
// to_blocked builds that layout from a [rows, blocks] grid by reshapes: padded to 128 x 4 tiles, viewed as
// [row tiles, 128, block tiles, 4], tiles brought together (permute 0, 2, 1, 3), each tile's [128, 4] viewed as
// [4, 32, 4] and its first two dims swapped. Done here with tensor ops on a grid of indices, then every byte's
// position checked against block_scale_offset.
TEST(BlockScaledMm, BlackwellScaleLayoutIsTorchaosToBlocked) {
  const int64_t rows = 200, blocks = 6, padded_rows = 256, padded_blocks = 8;
  EXPECT_EQ(fp8::block_scale_bytes(rows, blocks), padded_rows * padded_blocks);
  const Tensor grid = arange(static_cast<double>(padded_rows * padded_blocks)).reshape({padded_rows, padded_blocks});
  const Tensor blocked = grid.reshape({padded_rows / 128, 128, padded_blocks / 4, 4})
                             .permute({0, 2, 1, 3})
                             .reshape({-1, 4, 32, 4})
                             .transpose(1, 2)
                             .reshape({-1})
                             .contiguous();
  ASSERT_EQ(blocked.numel(), padded_rows * padded_blocks);
  for (int64_t p = 0; p < blocked.numel(); ++p) {
    const int64_t v = blocked.data<int64_t>()[p], r = v / padded_blocks, c = v % padded_blocks;
    ASSERT_EQ(fp8::block_scale_offset(r, c, padded_blocks), p) << "row " << r << " block " << c;
  }
}

// The scale bytes Blackwell's GEMM reads: E8M0 from the f32 dequantization factor (every byte, 2^-127 an f32
// subnormal and 255 nan included), and E2M1 pairs packed with the first element in the low nibble (PyTorch's
// float4_e2m1fn_x2) from the E4M3 bytes quantize_blocks stores.
TEST(BlockScaledMm, BlackwellOperandBytes) {
  for (int s = 0; s < 256; ++s) {
    const auto e = static_cast<uint8_t>(s);
    ASSERT_EQ(fp8::mx_scale_of(fp8::mx_dequant_scale(e)), e) << s;
  }
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};  // E2M1 codes 0 to 7
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      const float vi = (i & 8) != 0 ? -values[i & 7] : values[i & 7];
      const float vj = (j & 8) != 0 ? -values[j & 7] : values[j & 7];
      const uint8_t bi = Fp8E4M3Format::from_f32_bits(std::bit_cast<uint32_t>(vi), Fp8Overflow::kSaturate);
      const uint8_t bj = Fp8E4M3Format::from_f32_bits(std::bit_cast<uint32_t>(vj), Fp8Overflow::kSaturate);
      ASSERT_EQ(fp8::pack_e2m1_pair(bi, bj), i | (j << 4)) << vi << ", " << vj;
    }
  }
  // What quantize_blocks writes for NVFP4 packs the same way.
  const Tensor x = from_vector<float>(std::vector<float>{0.5f, -6.0f, 3.0f, 0.0f, 1.5f, -1.0f, 4.0f, 2.0f}, {1, 8});
  const BlockQuantized q = quantize_blocks(
      x, {.element = BlockElement::kE2M1, .rule = BlockScaleRule::kNvfp4, .block_cols = 16, .tensor_scale = false});
  const auto* bytes = static_cast<const uint8_t*>(q.data.data_ptr());
  // amax 6: the block scale is 1, so the elements are their own values.
  EXPECT_EQ(q.scale_inv.data<float>()[0], 1.0f);
  EXPECT_EQ(fp8::pack_e2m1_pair(bytes[0], bytes[1]), 0x1 | (0xF << 4));
  EXPECT_EQ(fp8::pack_e2m1_pair(bytes[2], bytes[3]), 0x5);
  EXPECT_EQ(fp8::pack_e2m1_pair(bytes[4], bytes[5]), 0x3 | (0xA << 4));
  EXPECT_EQ(fp8::pack_e2m1_pair(bytes[6], bytes[7]), 0x6 | (0x4 << 4));
}

TEST(BlockScaledMm, RefusesWhatItCannotTakeByName) {
  const Tensor a = quantize_blocks(ones({4, 64}), {.block_cols = 32}).data;
  const Tensor s = ones({4, 2});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] {
              block_scaled_mm(a, a.t(), s, ones({3, 4}), {.block_k = 32});
            }).find("scale_b f32 [2, 4]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              block_scaled_mm(a, a.t(), ones({4, 3}), s.t(), {.block_k = 32});
            }).find("scale_a f32 [4, 2]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              const Tensor e5 = quantize_blocks(ones({4, 64}), {.element = BlockElement::kE5M2, .block_cols = 32}).data;
              block_scaled_mm(a, e5.t(), s, s.t(), {.block_k = 32, .e2m1 = true});
            }).find("e2m1 says a and b hold E2M1 values, which are stored as f8e4m3 bytes; got a f8e4m3 and b f8e5m2"),
            std::string::npos);
  {
    Fp8AccumulatorScope hopper(Fp8Accumulator::hopper());
    EXPECT_NE(message([&] { block_scaled_mm(a, a.t(), s, s.t(), {.block_k = 32}); }).find("no 32-wide block scaling"),
              std::string::npos);
  }
  EXPECT_NE(message([&] {
              quantize_blocks(ones({2, 32}), {.element = BlockElement::kE4M3, .rule = BlockScaleRule::kNvfp4});
            }).find("NVFP4 scale rule takes E2M1"),
            std::string::npos);
  EXPECT_NE(message([&] {
              quantize_blocks(ones({2, 32}), {.element = BlockElement::kE2M1, .rule = BlockScaleRule::kF32});
            }).find("E2M1 elements take an E8M0 (MXFP4) or the NVFP4"),
            std::string::npos);
  EXPECT_NE(message([&] {
              quantize_blocks(ones({2, 32}), {.stochastic = true});
            }).find("stochastic rounding is for E2M1"),
            std::string::npos);
  EXPECT_NE(message([&] { quantize_blocks(ones({2, 32}), {.block_rows = 0}); }).find("at least 1"), std::string::npos);
  EXPECT_NE(message([&] { quantize_blocks(ones({2, 3, 4}), {}); }).find("expected a 2-D input"), std::string::npos);
}

}  // namespace
}  // namespace mantissa
