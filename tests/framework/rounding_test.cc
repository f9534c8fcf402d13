// framework/rounding.h on the host: rn::mul is the rounded product (zeros' signs, infinities and
// subnormals included) and stays unfused in a vectorized loop, where g++ would otherwise contract
// a * b + c; and cpu::VecMath::fma, written as a * b + c for ops/pointwise_math.h, is contracted into one
// rounding as the CPU elementwise ops assume.
#include "framework/rounding.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ops/cpu/vec_math.h"

namespace mantissa {
namespace {

// Random operands whose products and sums keep many bits, so one rounding and two often differ.
struct Operands {
  std::vector<float> a, b, c;
};
Operands random_operands(int n) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  Operands o;
  for (int i = 0; i < n; ++i) {
    o.a.push_back(u(rng));
    o.b.push_back(u(rng));
    o.c.push_back(u(rng));
  }
  return o;
}

// round(round(a * b) + c), computed without any compiler fusing: the float product is exact in double,
// and fma(p, 1, c) rounds p + c once.
float twice_rounded(float a, float b, float c) {
  const float p = static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
  return std::fma(p, 1.0f, c);
}

TEST(Rounding, MulIsTheRoundedProductBitForBit) {
  const float inf = std::numeric_limits<float>::infinity(), tiny = std::numeric_limits<float>::denorm_min();
  const float values[] = {0.0f, -0.0f, 1.0f, -1.5f, 3.0e38f, -3.0e38f, 1.0e-30f, tiny, inf, -inf, 0.1f, 7.0f};
  for (float a : values) {
    for (float b : values) {
      const float want = static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
      const float got = rn::mul(a, b);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << a << " * " << b;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << a << " * " << b;
      }
    }
  }
  EXPECT_EQ(std::bit_cast<uint64_t>(rn::mul(-0.0, 5.0)), std::bit_cast<uint64_t>(-0.0));
  EXPECT_EQ(rn::mul(0.1, 3.0), 0.1 * 3.0);
}

TEST(Rounding, MulThenAddRoundsTwiceInAVectorizableLoop) {
  const int n = 4099;  // vector body and scalar tail
  const Operands o = random_operands(n);
  std::vector<float> y(n);
  float* __restrict out = y.data();
  const float* __restrict a = o.a.data();
  const float* __restrict b = o.b.data();
  const float* __restrict c = o.c.data();
  for (int i = 0; i < n; ++i) out[i] = rn::mul(a[i], b[i]) + c[i];
  int fused_would_differ = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(y[i], twice_rounded(o.a[i], o.b[i], o.c[i])) << i;
    fused_would_differ += std::fma(o.a[i], o.b[i], o.c[i]) != y[i];
  }
  EXPECT_GT(fused_would_differ, n / 10);  // the check above can tell one rounding from two
}

TEST(Rounding, FmaRoundsOnce) {
  const Operands o = random_operands(1000);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(rn::fma(o.a[i], o.b[i], o.c[i]), std::fma(o.a[i], o.b[i], o.c[i])) << i;
  }
  EXPECT_EQ(rn::div(1.0f, 3.0f), 1.0f / 3.0f);
  EXPECT_EQ(rn::sqrt(2.0), std::sqrt(2.0));
}

// VecMath::fma is a * b + c left to g++'s contraction (see ops/cpu/vec_math.h); this file is built with
// the library's flags, so a build that stopped contracting would fail here as well as in the CPU ops.
TEST(Rounding, VecMathFmaIsContractedToOneRounding) {
  const int n = 4099;
  const Operands o = random_operands(n);
  std::vector<float> y(n);
  std::vector<double> ad(n), bd(n), cd(n), yd(n);
  for (int i = 0; i < n; ++i) {
    ad[i] = o.a[i];
    bd[i] = o.b[i] / 3.0;  // more bits than a float product has
    cd[i] = o.c[i];
  }
  for (int i = 0; i < n; ++i) y[i] = cpu::VecMath::fma(o.a[i], o.b[i], o.c[i]);
  for (int i = 0; i < n; ++i) yd[i] = cpu::VecMath::fma(ad[i], bd[i], cd[i]);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(y[i], std::fma(o.a[i], o.b[i], o.c[i])) << i;
    ASSERT_EQ(yd[i], std::fma(ad[i], bd[i], cd[i])) << i;
  }
}

}  // namespace
}  // namespace mantissa
