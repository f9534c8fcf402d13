// optim/norm_order.h, the summation order clip_grad_norm_ shares between the CPU and the CUDA kernels: the
// partial layout, fold()'s pairs, the clipping coefficient, and the CPU kernels checked bit for bit against
// the order written out element by element (the CUDA kernels are checked against the CPU kernels in
// tests/cuda/clip_grad_cuda_test.cc).
#include "optim/norm_order.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "optim/cpu/optim_kernels.h"

namespace mantissa {
namespace {

using norm_order::kBlock;
using norm_order::kBlockLanes;
using norm_order::kTotalLanes;

double plus(double a, double b) { return a + b; }

// Values spread over 2^-20 .. 2^20, so that adding them in another order changes low bits.
std::vector<float> wide_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> out(n);
  for (auto& x : out) x = std::ldexp(normal(rng), exponent(rng));
  return out;
}

// Level 1 written out: element i of a block to lane i % kBlockLanes, each lane in increasing i.
double reference_partial(const float* x, int64_t len) {
  std::vector<double> lanes(kBlockLanes, 0.0);
  for (int64_t i = 0; i < len; ++i) {
    double& lane = lanes[static_cast<size_t>(i % kBlockLanes)];
    lane = norm_order::add_square(lane, x[i]);
  }
  return norm_order::fold(lanes.data(), kBlockLanes, plus);
}

// Level 2 written out: partial p to lane p % kTotalLanes.
double reference_combine(const std::vector<double>& partials) {
  std::vector<double> lanes(kTotalLanes, 0.0);
  for (size_t p = 0; p < partials.size(); ++p) lanes[p % kTotalLanes] += partials[p];
  return norm_order::fold(lanes.data(), kTotalLanes, plus);
}

TEST(NormOrder, PartialOffsetsCountWholeAndShortBlocks) {
  EXPECT_EQ(norm_order::blocks(0), 0);
  EXPECT_EQ(norm_order::blocks(1), 1);
  EXPECT_EQ(norm_order::blocks(kBlock), 1);
  EXPECT_EQ(norm_order::blocks(kBlock + 1), 2);
  const std::vector<int64_t> sizes = {5, 0, kBlock, 3 * kBlock + 1, 1};
  EXPECT_EQ(norm_order::partial_offsets(sizes), (std::vector<int64_t>{0, 1, 1, 2, 6, 7}));
  EXPECT_EQ(norm_order::partial_offsets({}), (std::vector<int64_t>{0}));
}

TEST(NormOrder, FoldPairsLaneJWithLaneJPlusHalf) {
  // (a + c) + (b + d): the big values cancel first. Left to right, 1e16 + 1 would lose the 1.
  std::vector<double> s = {1e16, 1.0, -1e16, 1.0};
  EXPECT_EQ(norm_order::fold(s.data(), 4, plus), 2.0);
  EXPECT_EQ(((1e16 + 1.0) + -1e16) + 1.0, 1.0);
}

TEST(NormOrder, MaxNanLetsANanWin) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(norm_order::max_nan(1.0, 2.0), 2.0);
  EXPECT_EQ(norm_order::max_nan(2.0, 1.0), 2.0);
  EXPECT_TRUE(std::isnan(norm_order::max_nan(nan, 3.0)));
  EXPECT_TRUE(std::isnan(norm_order::max_nan(3.0, nan)));
}

TEST(NormOrder, ClipCoefficient) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(norm_order::clip_coefficient(13.0, 6.5), 6.5 / (13.0 + 1e-6));
  EXPECT_EQ(norm_order::clip_coefficient(inf, 1.0), 1.0);  // not finite: leave the grads alone
  EXPECT_EQ(norm_order::clip_coefficient(nan, 1.0), 1.0);
  EXPECT_EQ(norm_order::clip_coefficient(0.0, 1.0), 1.0 / 1e-6);
  EXPECT_EQ(norm_order::clip_coefficient(5.0, inf), inf);  // max_norm = inf never clips
  EXPECT_FALSE(norm_order::clip_coefficient(5.0, nan) < 1.0);
}

TEST(NormOrder, CpuPartialsFollowTheOrderBitForBit) {
  for (int64_t n :
       {int64_t{1}, int64_t{2047}, int64_t{2048}, int64_t{2049}, kBlock - 1, kBlock, kBlock + 1, 2 * kBlock + 4099}) {
    const std::vector<float> x = wide_values(static_cast<size_t>(n), static_cast<uint64_t>(n));
    std::vector<double> partials(static_cast<size_t>(norm_order::blocks(n)));
    cpu::norm_partials(x.data(), n, cpu::NormPartial::kSumSquares, partials.data());
    for (size_t b = 0; b < partials.size(); ++b) {
      const int64_t begin = static_cast<int64_t>(b) * kBlock;
      EXPECT_EQ(partials[b], reference_partial(x.data() + begin, std::min(kBlock, n - begin))) << n << " block " << b;
    }
    std::vector<double> maxes(partials.size());
    cpu::norm_partials(x.data(), n, cpu::NormPartial::kMaxAbs, maxes.data());
    for (size_t b = 0; b < maxes.size(); ++b) {
      double m = 0.0;
      for (int64_t i = static_cast<int64_t>(b) * kBlock; i < std::min(n, static_cast<int64_t>(b + 1) * kBlock); ++i)
        m = std::max(m, std::abs(double(x[static_cast<size_t>(i)])));
      EXPECT_EQ(maxes[b], m) << n << " block " << b;
    }
  }
}

TEST(NormOrder, CombineFollowsTheOrderAndTheOrderMatters) {
  // More partials than lanes, so some lanes take several.
  std::vector<double> partials;
  for (float x : wide_values(3 * kTotalLanes + 17, 5)) partials.push_back(double(x) * double(x) * 1e10);
  const double combined =
      cpu::combine_partials(partials.data(), static_cast<int64_t>(partials.size()), cpu::NormPartial::kSumSquares);
  EXPECT_EQ(combined, reference_combine(partials));
  // A test with teeth: left to right gives other bits for these values.
  double sequential = 0.0;
  for (double p : partials) sequential += p;
  EXPECT_NE(combined, sequential);
  EXPECT_NEAR(combined, sequential, 1e-13 * sequential);
  EXPECT_EQ(cpu::combine_partials(partials.data(), 0, cpu::NormPartial::kSumSquares), 0.0);
}

TEST(NormOrder, MaxPartialsAndCombineKeepANan) {
  std::vector<float> x = wide_values(2 * kBlock, 9);
  x[kBlock + 3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<double> maxes(2);
  cpu::norm_partials(x.data(), 2 * kBlock, cpu::NormPartial::kMaxAbs, maxes.data());
  EXPECT_FALSE(std::isnan(maxes[0]));
  EXPECT_TRUE(std::isnan(maxes[1]));
  EXPECT_TRUE(std::isnan(cpu::combine_partials(maxes.data(), 2, cpu::NormPartial::kMaxAbs)));
  std::swap(maxes[0], maxes[1]);  // first or last, the nan wins
  EXPECT_TRUE(std::isnan(cpu::combine_partials(maxes.data(), 2, cpu::NormPartial::kMaxAbs)));
}

}  // namespace
}  // namespace mantissa
