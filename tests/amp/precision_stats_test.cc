// The counts behind the precision report, on values whose fate in fp16 is known by hand.
#include "amp/precision_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/half.h"

namespace mantissa::amp {
namespace {

Tensor values(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector<float>(v, {n});
}

// The rounding limits the counts use are fp16's own: checked against the emulated fp16 conversion.
TEST(PrecisionStats, LimitsAreFp16s) {
  EXPECT_EQ(static_cast<float>(Half(static_cast<float>(fp16_limits::kRoundsToZeroAtMost))), 0.0f);
  EXPECT_GT(static_cast<float>(Half(std::nextafter(static_cast<float>(fp16_limits::kRoundsToZeroAtMost), 1.0f))), 0.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(static_cast<float>(fp16_limits::kOverflowAt)))));
  EXPECT_EQ(static_cast<float>(Half(std::nextafter(static_cast<float>(fp16_limits::kOverflowAt), 0.0f))), 65504.0f);
  EXPECT_EQ(static_cast<float>(Half(static_cast<float>(fp16_limits::kMinSubnormal))), 0x1p-24f);
}

TEST(PrecisionStats, RangeFractionsByHand) {
  // 10 values: one above 65504, two subnormal in fp16 (one of them below 2^-24 too), one zero, one inf.
  const Tensor t = values(
      {1.0f, 70000.0f, 1e-5f, 1e-8f, 0.0f, -2.0f, 3.0f, 0x1p-14f, -65504.0f, std::numeric_limits<float>::infinity()});
  const RangeFractions r = range_fractions(t);
  EXPECT_EQ(r.numel, 10);
  EXPECT_DOUBLE_EQ(r.above_f16_max, 0.1);
  EXPECT_DOUBLE_EQ(r.below_f16_normal, 0.2);  // 1e-5 and 1e-8; 2^-14 is normal, 0 is not counted
  EXPECT_DOUBLE_EQ(r.below_f16_subnormal, 0.1);
  EXPECT_DOUBLE_EQ(r.nonfinite, 0.1);
  // The fp32 baseline compared with itself has nothing above or below beyond what its values hold.
  EXPECT_EQ(range_fractions(values({})).numel, 0);
}

TEST(PrecisionStats, ScaledUnderflowByHand) {
  // Eight nonzero gradients and two zeros. Unscaled: 2^-26 and 2^-25 flush to zero, 2^-24 and 2^-20 are
  // subnormal, 2^-10, 1, 100 and 5e4 are normal.
  const Tensor g = values({0x1p-26f, -0x1p-25f, 0x1p-24f, 0x1p-20f, 0.0f, 0x1p-10f, 1.0f, -100.0f, 5e4f, 0.0f});
  const ScaledUnderflow u = scaled_underflow(g, 1.0);
  EXPECT_EQ(u.numel, 10);
  EXPECT_EQ(u.nonzero, 8);
  EXPECT_DOUBLE_EQ(u.underflow, 2.0 / 8);
  EXPECT_DOUBLE_EQ(u.subnormal, 2.0 / 8);
  EXPECT_DOUBLE_EQ(u.overflow, 0.0);
  EXPECT_DOUBLE_EQ(u.max_abs, 5e4);
  EXPECT_DOUBLE_EQ(u.min_abs_nonzero, 0x1p-26);
  // Scaled by 2^4: 2^-22 .. 2^-16 are all subnormal (none flushed), 5e4 * 16 overflows.
  const ScaledUnderflow s = scaled_underflow(g, 16.0);
  EXPECT_DOUBLE_EQ(s.underflow, 0.0);
  EXPECT_DOUBLE_EQ(s.subnormal, 4.0 / 8);
  EXPECT_DOUBLE_EQ(s.overflow, 1.0 / 8);
  EXPECT_THROW(scaled_underflow(g, 0.0), Error);
}

TEST(PrecisionStats, SuggestedScaleKeepsTheLargestGradientInRange) {
  EXPECT_EQ(suggested_loss_scale(1.0), 16384.0);     // 1 * 2^14 <= 32752 < 2^15
  EXPECT_EQ(suggested_loss_scale(1.0, 0), 32768.0);  // 2^15 <= 65504 < 2^16
  EXPECT_EQ(suggested_loss_scale(32752.0), 1.0);     // exactly at the limit with one bit of headroom
  EXPECT_EQ(suggested_loss_scale(1e6), 1.0);         // never below 1
  EXPECT_EQ(suggested_loss_scale(1e-12), 0x1p24);    // capped
  EXPECT_EQ(suggested_loss_scale(0.0), 0x1p24);      // all-zero gradients: nothing to bound
  const double s = suggested_loss_scale(3e-3);
  EXPECT_LE(3e-3 * s, 65504.0 / 2);
  EXPECT_GT(3e-3 * s * 2, 65504.0 / 2);
}

TEST(PrecisionStats, Log2HistogramBinsByExponent) {
  Log2Histogram h;
  h.add(values({1.0f, 1.5f, -2.0f, 0x1p-30f, 0.0f, std::numeric_limits<float>::quiet_NaN(), 0x1p-80f}));
  EXPECT_EQ(h.count_at(0), 2);  // 1 and 1.5
  EXPECT_EQ(h.count_at(1), 1);  // 2
  EXPECT_EQ(h.count_at(-30), 1);
  EXPECT_EQ(h.zeros(), 1);
  EXPECT_EQ(h.nonfinite(), 1);
  EXPECT_EQ(h.below_range(), 1);  // 2^-80, counted in the first bin
  EXPECT_EQ(h.count_at(Log2Histogram::kMinExponent), 1);
  EXPECT_EQ(h.total(), 7);
  // Scaling by 2^10 moves every value ten bins up.
  Log2Histogram scaled;
  scaled.add(values({1.0f, 0x1p-30f}), 1024.0);
  EXPECT_EQ(scaled.count_at(10), 1);
  EXPECT_EQ(scaled.count_at(-20), 1);
}

}  // namespace
}  // namespace mantissa::amp
