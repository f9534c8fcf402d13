// clip_grad_norm_ and clip_grad_value_: closed-form norms, f64 accumulation, independence from the
// thread count, and what a non-finite norm does (returned; grads untouched).
#include "optim/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <omp.h>

#include "framework/random.h"

namespace mantissa {
namespace {

Tensor param_with_grad(const std::vector<float>& grad) {
  Tensor p = zeros({static_cast<int64_t>(grad.size())}).set_requires_grad(true);
  p.set_grad(from_vector(grad));
  return p;
}

std::vector<float> grad_values(const Tensor& p) {
  const float* g = p.grad().data<float>();
  return std::vector<float>(g, g + p.numel());
}

TEST(ClipGradNorm, ScalesByMaxNormOverTotal) {
  Tensor a = param_with_grad({3, 4}), b = param_with_grad({12}), none = zeros({2}).set_requires_grad(true);
  const double total = clip_grad_norm_({a, b, none}, 6.5);
  EXPECT_EQ(total, 13.0);                                      // sqrt(9 + 16 + 144), exact in f64
  const float coef = static_cast<float>(6.5 / (13.0 + 1e-6));  // computed in f64, rounded once
  EXPECT_EQ(grad_values(a), (std::vector<float>{3 * coef, 4 * coef}));
  EXPECT_EQ(grad_values(b), (std::vector<float>{12 * coef}));
  EXPECT_FALSE(none.grad().defined());
}

TEST(ClipGradNorm, BelowTheLimitLeavesGradsAlone) {
  Tensor a = param_with_grad({3, 4});
  EXPECT_EQ(clip_grad_norm_({a}, 5.1), 5.0);
  EXPECT_EQ(grad_values(a), (std::vector<float>{3, 4}));
}

TEST(ClipGradNorm, InfNormIsTheLargestMagnitude) {
  Tensor a = param_with_grad({3, -7}), b = param_with_grad({2});
  EXPECT_EQ(clip_grad_norm_({a, b}, 3.5, NormType::kInf), 7.0);
  const float coef = static_cast<float>(3.5 / (7.0 + 1e-6));
  EXPECT_EQ(grad_values(a), (std::vector<float>{3 * coef, -7 * coef}));
}

TEST(ClipGradNorm, AccumulatesInDouble) {
  // 1e20^2 overflows f32 but not f64: the total is still right.
  Tensor a = param_with_grad({1e20f, 1e20f});
  const double total = clip_grad_norm_({a}, 1.0);
  EXPECT_NEAR(total, std::sqrt(2.0) * double(1e20f), 1e-12 * total);
  EXPECT_NEAR(grad_values(a)[0], 1.0 / std::sqrt(2.0), 1e-6);
}

TEST(ClipGradNorm, NonFiniteTotalIsReturnedAndGradsAreUntouched) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor a = param_with_grad({1, inf}), b = param_with_grad({5});
  EXPECT_EQ(clip_grad_norm_({a, b}, 1.0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(grad_values(a)[0], 1.0f);
  EXPECT_EQ(grad_values(b)[0], 5.0f);
  Tensor c = param_with_grad({std::nanf(""), 2});
  EXPECT_TRUE(std::isnan(clip_grad_norm_({b, c}, 1.0)));
  EXPECT_TRUE(std::isnan(clip_grad_norm_({b, c}, 1.0, NormType::kInf)));
  EXPECT_EQ(grad_values(c)[1], 2.0f);
  EXPECT_EQ(grad_values(b)[0], 5.0f);
}

TEST(ClipGradNorm, SameTotalForAnyThreadCount) {
  Generator gen(3);
  Tensor p = zeros({1 << 20}).set_requires_grad(true);
  p.set_grad(randn({1 << 20}, {}, &gen));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = clip_grad_norm_({p}, 1e9);
  omp_set_num_threads(2);
  const double two = clip_grad_norm_({p}, 1e9);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, two);  // fixed blocks, fixed order
  long double ref = 0;
  for (int64_t i = 0; i < p.numel(); ++i) ref += (long double)p.grad().data<float>()[i] * p.grad().data<float>()[i];
  // Different summation order than the long double reference: a few 1e-16 relative at 2^20 terms.
  EXPECT_NEAR(one, std::sqrt(static_cast<double>(ref)), 1e-12 * one);
}

TEST(ClipGradValue, ClampsAndKeepsNan) {
  Tensor a = param_with_grad({-3, 0.5f, 2, std::nanf("")});
  clip_grad_value_({a}, 1.0);
  const auto g = grad_values(a);
  EXPECT_EQ(g[0], -1.0f);
  EXPECT_EQ(g[1], 0.5f);
  EXPECT_EQ(g[2], 1.0f);
  EXPECT_TRUE(std::isnan(g[3]));
}

}  // namespace
}  // namespace mantissa
