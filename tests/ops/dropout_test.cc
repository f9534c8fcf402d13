// dropout: the mask comes from the Generator (a seed reproduces it), survivors are scaled by
// 1 / (1 - p), the keep rate is 1 - p, the backward reuses the mask, and p = 0 / p = 1 behave.
#include "ops/dropout/dropout.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/ops/nn_testing.h"

namespace mantissa {
namespace {

using testing::all_close;

TEST(Dropout, SeedReproducesMaskAndScales) {
  const Tensor x = testing::random_tensor({64, 33}, 31, kFloat32, 0.5, 1.5);  // no zeros in x
  Generator g1(123), g2(123), g3(124);
  const Tensor a = dropout(x, 0.3, &g1), b = dropout(x, 0.3, &g2), c = dropout(x, 0.3, &g3);
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_FALSE(all_close(a, c, 0, 0));
  // The mask is the generator's stream in element order: kept where uniform_float() < 1 - p.
  Generator g4(123);
  const std::vector<double> xv = testing::values(x), av = testing::values(a);
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool keep = g4.uniform_float() < 0.7f;
    ASSERT_EQ(av[i], keep ? static_cast<double>(static_cast<float>(xv[i]) * static_cast<float>(1 / 0.7)) : 0.0) << i;
  }
}

TEST(Dropout, KeepRateIsOneMinusP) {
  const Tensor x = ones({200000});
  Generator gen(7);
  const std::vector<double> v = testing::values(dropout(x, 0.25, &gen));
  double kept = 0;
  for (double e : v) kept += e != 0;
  // Binomial(200000, 0.75): standard deviation 194, so 5 sigma is under 0.005 of the rate.
  EXPECT_NEAR(kept / 200000, 0.75, 0.005);
  // The expectation is preserved: mean(dropout(1)) ~ 1 (same 5-sigma bound, scaled by 1/0.75).
  double total = 0;
  for (double e : v) total += e;
  EXPECT_NEAR(total / 200000, 1.0, 0.007);
}

TEST(Dropout, BackwardUsesTheSameMask) {
  const Tensor x = testing::random_tensor({10, 10}, 32, kFloat64, 0.5, 1.5).set_requires_grad(true);
  Generator gen(5);
  const Tensor y = dropout(x, 0.5, &gen);
  const Tensor g = testing::random_tensor({10, 10}, 33);
  y.backward(g);
  const std::vector<double> yv = testing::values(y), gv = testing::values(g), dx = testing::values(x.grad());
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(dx[i], yv[i] == 0 ? 0.0 : gv[i] * 2.0) << i;
}

TEST(Dropout, DefaultGeneratorIsSeededByManualSeed) {
  const Tensor x = ones({1000});
  manual_seed(99);
  const Tensor a = dropout(x, 0.5);
  manual_seed(99);
  const Tensor b = dropout(x, 0.5);
  EXPECT_TRUE(all_close(a, b, 0, 0));
}

TEST(Dropout, ZeroAndOne) {
  const Tensor x = testing::random_tensor({4, 5}, 34).set_requires_grad(true);
  Generator gen(1);
  const GeneratorState before = gen.state();
  EXPECT_TRUE(dropout(x, 0.0, &gen).is_same(x));  // p = 0: x itself
  const Tensor z = dropout(x, 1.0, &gen);
  EXPECT_EQ(gen.state(), before);  // neither draws from the generator
  EXPECT_TRUE(all_close(z, zeros({4, 5}, {.dtype = kFloat64}), 0, 0));
  z.backward(ones({4, 5}, {.dtype = kFloat64}));
  EXPECT_TRUE(all_close(x.grad(), zeros({4, 5}, {.dtype = kFloat64}), 0, 0));
}

TEST(Dropout, SixteenBitAndNonContiguous) {
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = testing::random_tensor({6, 8}, 35, dt).t();  // non-contiguous [8, 6]
    Generator g1(3), g2(3);
    const Tensor y = dropout(x, 0.2, &g1);
    EXPECT_EQ(y.dtype(), dt);
    // One rounding of x * 1.25 computed in fp32: the same as the f32 op rounded to dt.
    EXPECT_TRUE(all_close(y, dropout(x.to(kFloat32), 0.2, &g2).to(dt), 0, 0));
  }
}

TEST(Dropout, Errors) {
  const std::string p = testing::error_of([] { dropout(ones({2}), 1.5); });
  EXPECT_NE(p.find("dropout: probability has to be between 0 and 1, but got 1.5"), std::string::npos) << p;
  const std::string dt = testing::error_of([] { dropout(ones({2}, {.dtype = kInt64}), 0.5); });
  EXPECT_NE(dt.find("dropout: expected a floating tensor, got i64"), std::string::npos) << dt;
}

}  // namespace
}  // namespace mantissa
