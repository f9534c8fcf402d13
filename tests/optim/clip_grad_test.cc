// clip_grad_norm_, enqueue_clip_grad_norm_ and clip_grad_value_ on the CPU: closed-form norms, f64
// accumulation, independence from the thread count, what a non-finite norm does (returned; grads
// untouched), and the enqueued variant equal to the plain one.
#include "optim/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

TEST(ClipGradNorm, OverflowOfF32SumsIsClipped) {
  // Four grads of 1e20: each square is 1e40, past f32's 3.4e38, and the sum of squares is finite in f64,
  // so the grads are clipped (a sum in f32 would be inf and leave them untouched).
  Tensor a = param_with_grad(std::vector<float>(4, 1e20f));
  const double total = clip_grad_norm_({a}, 1.0);
  EXPECT_EQ(total, 2.0 * double(1e20f));  // sqrt(4 x^2), exact
  for (float g : grad_values(a)) EXPECT_EQ(g, 1e20f * static_cast<float>(1.0 / (total + 1e-6)));
}

TEST(ClipGradNorm, InfiniteMaxNormChangesNothing) {
  Tensor a = param_with_grad({3, 4});
  EXPECT_EQ(clip_grad_norm_({a}, std::numeric_limits<double>::infinity()), 5.0);
  EXPECT_EQ(grad_values(a), (std::vector<float>{3, 4}));
}

TEST(ClipGradNorm, NoGradsGiveZero) {
  Tensor none = zeros({2}).set_requires_grad(true);
  EXPECT_EQ(clip_grad_norm_({none}, 1.0), 0.0);
  const Tensor total = enqueue_clip_grad_norm_(std::vector<Tensor>{none}, 1.0);
  EXPECT_EQ(total.dtype(), DType::kF64);
  EXPECT_TRUE(total.device().is_cpu());
  EXPECT_EQ(total.item(), 0.0);
}

// Grads of many sizes (short and whole norm blocks), f32 and f64, on two identical sets of parameters.
std::vector<Tensor> mixed_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (int64_t n : {int64_t{1}, int64_t{5000}, int64_t{16384}, int64_t{40001}, int64_t{3}}) {
    const DType dtype = n % 2 == 0 ? DType::kF64 : DType::kF32;
    Tensor p = zeros({n}, {.dtype = dtype}).set_requires_grad(true);
    p.set_grad(randn({n}, {.dtype = dtype}, &gen));
    out.push_back(p);
  }
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST(ClipGradNorm, EnqueueOnTheCpuIsClipGradNormBitForBit) {
  for (NormType type : {NormType::kL2, NormType::kInf}) {
    for (double max_norm : {0.5, 1e9}) {
      auto plain = mixed_params(11), enqueued = mixed_params(11);
      const double total = clip_grad_norm_(plain, max_norm, type);
      const Tensor t = enqueue_clip_grad_norm_(enqueued, max_norm, type);
      EXPECT_EQ(t.dtype(), DType::kF64);
      EXPECT_EQ(t.dim(), 0);
      EXPECT_TRUE(t.device().is_cpu());
      EXPECT_EQ(t.item(), total);
      for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(same_bits(plain[i].grad(), enqueued[i].grad())) << i;
    }
  }
  // The grads were clipped (max_norm 0.5) or not (1e9): the coefficient was decided as the header says.
  auto a = mixed_params(11), b = mixed_params(11);
  clip_grad_norm_(a, 1e9);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i].grad(), b[i].grad()));
  const double total = clip_grad_norm_(a, 0.5);
  const double coef = 0.5 / (total + 1e-6);
  EXPECT_EQ(a[0].grad().data<float>()[0], b[0].grad().data<float>()[0] * static_cast<float>(coef));
  EXPECT_EQ(a[2].grad().data<double>()[7], b[2].grad().data<double>()[7] * coef);
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
