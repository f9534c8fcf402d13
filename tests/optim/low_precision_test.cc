// optim/low_precision.h against the libraries that define its pieces (tests/golden/low_precision_optim.h5, written
// by scripts/golden/low_precision_optim.py: bitsandbytes 0.50's dynamic maps and CPU block-wise quantization,
// torchao 0.18's bfloat16 stochastic rounding) and against what each piece promises: stochastic rounding unbiased
// (exactly, over every 16-bit draw) and replayable, Kahan's bfloat16 sum following the f64 sum where rounding to
// nearest stalls, and the quantizer's code always a nearest entry of the map.
#include "optim/low_precision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/support/golden.h"

namespace mantissa {
namespace {

namespace lp = low_precision;

float dist(float a, float b) { return std::fabs(a - b); }

TEST(LowPrecision, DynamicMapsAreBitsandbytesPublishedMaps) {
  testing::GoldenFile g("low_precision_optim.h5");
  for (const bool is_signed : {true, false}) {
    const std::vector<float> want = g.f32(std::string("/dynamic_map/") + (is_signed ? "signed" : "unsigned"));
    ASSERT_EQ(want.size(), 256u);
    const float* map = lp::dynamic_map(is_signed);
    for (int i = 0; i < 256; ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(map[i]), std::bit_cast<uint32_t>(want[i])) << "entry " << i;
    for (int i = 1; i < 256; ++i) EXPECT_LE(map[i - 1], map[i]) << "sorted";
  }
  // The map's definition (Dettmers 2016; bitsandbytes' create_dynamic_map) computed in double: for exponent i of
  // 0..6, the midpoints of linspace(0.1, 1, 2^i + 1) (unsigned: 2^(i+1) + 1) times 10^(i - 6), with their
  // negatives when signed, and 0 and 1. bitsandbytes computes the linspace and the products in float32, so entries
  // may differ by two float32 ulps; none by more.
  for (const bool is_signed : {true, false}) {
    std::vector<double> def = {0.0, 1.0};
    for (int i = 0; i < 7; ++i) {
      const int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
      for (int j = 0; j + 1 < items; ++j) {
        const double lo = 0.1 + 0.9 * j / (items - 1), hi = 0.1 + 0.9 * (j + 1) / (items - 1);
        const double v = std::pow(10.0, i - 6) * (lo + hi) / 2;
        def.push_back(v);
        if (is_signed) def.push_back(-v);
      }
    }
    while (def.size() < 256) def.push_back(0.0);
    std::sort(def.begin(), def.end());
    const float* map = lp::dynamic_map(is_signed);
    for (int i = 0; i < 256; ++i) {
      const float d = static_cast<float>(def[static_cast<size_t>(i)]);
      const float ulp = std::fabs(std::nextafter(d, d < 0.0f ? -2.0f : 2.0f) - d);
      EXPECT_LE(std::fabs(map[i] - d), 2 * ulp) << "entry " << i;
    }
  }
}

// bitsandbytes' CPU quantize_blockwise (its compiled BinSearch) does not always return the nearest entry: exact
// map entries, zeros (code 131, 2.1e-5, instead of 0's code), values near entries. mantissa's code is the nearest
// entry always; where bitsandbytes' is also a nearest entry the two are the same byte (at an exact tie either
// neighbour is nearest, and they may differ), and its absmax and dequantization (map[code] * absmax) are the same
// floats. On the random cases bitsandbytes' entry is farther for under 5% of the values.
TEST(LowPrecision, BlockwiseQuantizationAgainstBitsandbytes) {
  testing::GoldenFile g("low_precision_optim.h5");
  for (const std::string& name : g.members("/blockwise")) {
    SCOPED_TRACE(name);
    const std::string at = "/blockwise/" + name;
    const std::vector<float> x = g.f32(at + "/input");
    const bool is_signed = g.attr_i64(at, "signed") != 0;
    const int64_t block = g.attr_i64(at, "blocksize"), n = static_cast<int64_t>(x.size());
    const std::vector<uint8_t> want = g.u8(at + "/codes");
    const std::vector<float> want_absmax = g.f32(at + "/absmax"), want_dequant = g.f32(at + "/dequant");
    std::vector<uint8_t> codes(x.size());
    std::vector<float> absmax(want_absmax.size()), bnb_dequant(x.size());
    lp::quantize_blockwise(x.data(), n, block, is_signed, codes.data(), absmax.data());
    for (size_t k = 0; k < absmax.size(); ++k)
      EXPECT_EQ(std::bit_cast<uint32_t>(absmax[k]), std::bit_cast<uint32_t>(want_absmax[k]));
    lp::dequantize_blockwise(want.data(), absmax.data(), n, block, is_signed, bnb_dequant.data());
    const float* map = lp::dynamic_map(is_signed);
    int64_t same = 0, tie = 0, bnb_farther = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(bnb_dequant[i]), std::bit_cast<uint32_t>(want_dequant[i])) << i;
      const float v = x[i] / absmax[i / block];
      float best = dist(v, map[0]);
      for (int e = 1; e < 256; ++e) best = std::min(best, dist(v, map[e]));
      ASSERT_EQ(dist(v, map[codes[i]]), best) << "element " << i << ": not a nearest entry";
      if (codes[i] == want[i] || map[codes[i]] == map[want[i]]) {
        ++same;
      } else if (dist(v, map[want[i]]) == best) {
        ++tie;
      } else {
        ++bnb_farther;
      }
    }
    std::printf(
        "  %-18s %5lld of %5lld codes equal bitsandbytes', %3lld ties the other way, %4lld where its entry is "
        "farther\n",
        name.c_str(), static_cast<long long>(same), static_cast<long long>(n), static_cast<long long>(tie),
        static_cast<long long>(bnb_farther));
    if (name == "normal" || name == "positive" || name == "small_blocks") {
      EXPECT_LT(bnb_farther * 20, n);
    }
  }
}

TEST(LowPrecision, ZeroBlocksAndNanQuantizeWithoutDividingByZero) {
  const std::vector<float> zeros(100, 0.0f);
  std::vector<uint8_t> codes(100);
  float absmax = -1.0f;
  lp::quantize_blockwise(zeros.data(), 100, 2048, true, codes.data(), &absmax);
  EXPECT_EQ(absmax, 0.0f);
  EXPECT_EQ(lp::dynamic_map(true)[codes[0]], 0.0f);
  std::vector<float> back(100, 1.0f);
  lp::dequantize_blockwise(codes.data(), &absmax, 100, 2048, true, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

TEST(LowPrecision, StochasticRoundingIsTorchaosBitForBit) {
  testing::GoldenFile g("low_precision_optim.h5");
  for (const std::string& name : g.members("/bf16_sr")) {
    SCOPED_TRACE(name);
    const std::string at = "/bf16_sr/" + name;
    const std::vector<float> x = g.f32(at + "/input");
    const std::vector<int64_t> random = g.i64(at + "/random");
    const std::vector<uint16_t> want = g.u16(at + "/output");
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(lp::bf16_stochastic(x[i], static_cast<uint32_t>(random[i])), want[i])
          << "input 0x" << std::hex << std::bit_cast<uint32_t>(x[i]) << " random " << std::dec << random[i];
  }
  EXPECT_TRUE(std::isnan(lp::bf16_value(lp::bf16_stochastic(std::bit_cast<float>(0x7f800001u), 0u))));
}

// Over every one of the 2^16 draws, exactly (low 16 bits) of them round away from zero: the mean of the rounded
// values is x itself, exactly, and the probability of rounding up is the distance over the ulp.
TEST(LowPrecision, StochasticRoundingIsExactlyUnbiased) {
  for (const uint32_t bits : {0x3f800001u, 0x3f80ffffu, 0x3f808000u, 0xbf812345u, 0x00012345u, 0x7f7f8000u}) {
    const float x = std::bit_cast<float>(bits);
    double sum = 0.0;
    int64_t up = 0;
    for (uint32_t r = 0; r < 65536; ++r) {
      const uint16_t b = lp::bf16_stochastic(x, r);
      sum += static_cast<double>(lp::bf16_value(b));
      up += b != static_cast<uint16_t>(bits >> 16) ? 1 : 0;
    }
    EXPECT_EQ(up, static_cast<int64_t>(bits & 0xffffu)) << std::hex << bits;
    if (std::isfinite(sum)) {
      EXPECT_EQ(sum / 65536.0, static_cast<double>(x)) << std::hex << bits;
    }
  }
}

// The update's random words: a function of (seed, stream, step, index) alone; the drawn low halves are uniform
// (a chi-square over 16 bins) and differ between steps and streams.
TEST(LowPrecision, UpdateRandomReplaysAndSpreads) {
  EXPECT_EQ(lp::update_random(7, 3, 11, 12345), lp::update_random(7, 3, 11, 12345));
  int64_t same_step = 0, same_stream = 0;
  std::vector<int64_t> bins(16, 0);
  const int64_t n = 1 << 16;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t w = lp::update_random(7, 3, 11, static_cast<uint64_t>(i));
    bins[(w & 0xffffu) >> 12] += 1;
    same_step += w == lp::update_random(7, 3, 12, static_cast<uint64_t>(i)) ? 1 : 0;
    same_stream += w == lp::update_random(7, 4, 11, static_cast<uint64_t>(i)) ? 1 : 0;
  }
  double chi2 = 0.0;
  for (int64_t b : bins) chi2 += std::pow(static_cast<double>(b) - n / 16.0, 2) / (n / 16.0);
  EXPECT_LT(chi2, 37.7);  // 15 degrees of freedom, p = 0.001
  EXPECT_LT(same_step, 4);
  EXPECT_LT(same_stream, 4);
}

// 4096 updates of 1e-4 onto 1.0 (each below half of bfloat16's ulp there, 2^-8): rounding to nearest never moves
// the parameter; Kahan's ends within two ulps of the f64 sum; stochastic rounding within a few standard deviations
// of it. Then updates of random sign and size: Kahan within one ulp, rounding to nearest drifted away.
TEST(LowPrecision, KahanAndStochasticRoundingFollowTheF64Sum) {
  const int steps = 4096;
  uint16_t nearest = lp::bf16_nearest(1.0f), kahan = nearest, comp = 0, sr = nearest;
  double exact = 1.0;
  for (int s = 0; s < steps; ++s) {
    const float delta = 1e-4f;
    exact += static_cast<double>(delta);
    nearest = lp::bf16_nearest(lp::bf16_value(nearest) + delta);
    lp::kahan_bf16(kahan, comp, lp::bf16_value(kahan) + delta);
    sr = lp::bf16_stochastic(lp::bf16_value(sr) + delta, lp::update_random(1, 0, static_cast<uint32_t>(s), 0));
  }
  EXPECT_EQ(lp::bf16_value(nearest), 1.0f);  // 0.41 short
  const double ulp = std::ldexp(1.0, -7);    // bfloat16's ulp in [1, 2)
  // The compensation is itself a bfloat16: near half an ulp of p its own ulp is 2^-16, so each 1e-4 it absorbs is
  // rounded by up to 8%: two ulps of p after 4096 steps, where rounding to nearest is 52 ulps short.
  EXPECT_LE(std::fabs(lp::bf16_value(kahan) - exact), 2 * ulp);
  // Each step's rounding error has variance below ulp^2 / 4: the sum's standard deviation below ulp / 2 * 64.
  EXPECT_LE(std::fabs(lp::bf16_value(sr) - exact), 5 * ulp / 2 * 64);

  // Random-signed updates of many sizes onto a weight near 0.3.
  uint32_t state = 12345;
  auto uniform = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<double>(state >> 8) / 16777216.0;
  };
  uint16_t p = lp::bf16_nearest(0.3f), q = p, c = 0;
  exact = static_cast<double>(lp::bf16_value(p));
  double drift_nearest = 0.0;
  for (int s = 0; s < steps; ++s) {
    const float delta = static_cast<float>((uniform() - 0.45) * std::pow(10.0, -2.0 - 3.0 * uniform()));
    exact += static_cast<double>(delta);
    lp::kahan_bf16(p, c, lp::bf16_value(p) + delta);
    q = lp::bf16_nearest(lp::bf16_value(q) + delta);
    drift_nearest = std::fabs(lp::bf16_value(q) - exact);
  }
  const double ulp_p = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(std::fabs(exact)))) - 7);
  EXPECT_LE(std::fabs(lp::bf16_value(p) - exact), ulp_p) << "Kahan";
  EXPECT_GT(drift_nearest, 4 * ulp_p) << "rounding to nearest should have drifted";
}

// Adam's second moments round up (optim/precision_ladder.h): the code is the smallest entry at or above the value, so
// a positive moment never becomes 0; every entry maps to itself.
TEST(LowPrecision, UpperCodeIsTheSmallestEntryAtOrAbove) {
  for (const bool is_signed : {true, false}) {
    const float* map = lp::dynamic_map(is_signed);
    for (int i = 0; i < lp::kMapSize; ++i) EXPECT_EQ(lp::upper_code(map, map[i]), i);
    uint32_t state = 12345;
    for (int k = 0; k < 20000; ++k) {
      state = state * 1664525u + 1013904223u;
      const float u = float(state >> 8) / float(1 << 24);           // [0, 1)
      const float v = is_signed ? 2.0f * u - 1.0f : u * u * u * u;  // dense near 0 too
      const uint8_t c = lp::upper_code(map, v);
      ASSERT_GE(map[c], v) << v;
      if (c > 0) {
        ASSERT_LT(map[c - 1], v) << v;
      }
    }
    EXPECT_GT(map[lp::upper_code(map, 1e-30f)], 0.0f) << "a tiny positive value never rounds to 0";
  }
}

// The host quantizer's table lookup finds the binary search's index for every 251st of the 2^32 bit patterns (17
// million floats, every exponent), every map entry and its two neighbouring floats, signed zeros, infinities and
// nans.
TEST(LowPrecision, FastFloorIndexIsTheBinarySearch) {
  for (const bool is_signed : {true, false}) {
    const float* map = lp::dynamic_map(is_signed);
    auto check = [&](float v) {
      ASSERT_EQ(lp::floor_index_fast(is_signed, v), lp::floor_index(map, v)) << std::bit_cast<uint32_t>(v);
    };
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 251) check(std::bit_cast<float>(static_cast<uint32_t>(b)));
    for (int i = 0; i < lp::kMapSize; ++i) {
      check(map[i]);
      check(std::nextafter(map[i], -2.0f));
      check(std::nextafter(map[i], 2.0f));
    }
    for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN}) check(v);
  }
}

// quantize_blockwise's vector path (AVX2 gathers where the build has them) against nearest_code and upper_code
// value by value: random blocks of every length up to 40 (the vector body and its scalar tail), values spread over
// 30 powers of ten, exact map entries times the block's absmax, zeros, and blocks with an inf or a nan.
TEST(LowPrecision, BlockQuantizerEqualsTheScalarRule) {
  uint32_t state = 99;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  for (const bool is_signed : {true, false}) {
    const float* map = lp::dynamic_map(is_signed);
    for (const lp::CodeRounding r : {lp::CodeRounding::kNearest, lp::CodeRounding::kUp}) {
      for (int trial = 0; trial < 4000; ++trial) {
        const int64_t n = 1 + trial % 40;
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) {
          const uint32_t kind = next() % 16;
          const float mag = std::pow(10.0f, float(next() % 30) - 25.0f) * (float(next() >> 8) / float(1 << 24));
          v = kind == 0 ? 0.0f : kind == 1 ? map[next() % 256] : mag;
          if (is_signed && (next() & 1)) v = -v;
          if (!is_signed) v = std::fabs(v);
        }
        if (trial % 97 == 0) x[size_t(next() % uint32_t(n))] = INFINITY;
        if (trial % 89 == 0) x[size_t(next() % uint32_t(n))] = NAN;
        std::vector<uint8_t> codes(static_cast<size_t>(n));
        float absmax = 0;
        lp::quantize_blockwise(x.data(), n, 2048, is_signed, codes.data(), &absmax, r);
        for (int64_t i = 0; i < n; ++i) {
          const float v = absmax > 0.0f ? x[size_t(i)] / absmax : 0.0f;
          const uint8_t want = r == lp::CodeRounding::kUp ? lp::upper_code(map, v) : lp::nearest_code(map, v);
          ASSERT_EQ(codes[size_t(i)], want)
              << "value " << x[size_t(i)] << " of a block of " << n << ", absmax " << absmax;
        }
      }
    }
  }
}

}  // namespace
}  // namespace mantissa
