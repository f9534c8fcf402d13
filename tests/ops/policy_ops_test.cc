// The ops added for the autocast policy table (l1/smooth_l1/bce/bce_with_logits losses, logsumexp, prod,
// norm, cumsum, dot, addcmul, addcdiv, conv1d, group_norm, scatter_add): gradcheck through the one
// harness, values against f64 references written out here, and their argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "ops/conv/conv.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "tests/support/gradcheck.h"

namespace mantissa::testing {
namespace {

using In = std::vector<Tensor>;

Tensor rnd(const Shape& s, uint64_t seed, RandomInputOptions o = {}) { return random_input(s, seed, o); }
Tensor f64(std::vector<double> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector<double>(v, shape);
}
Tensor i64(std::vector<int64_t> v, Shape shape) { return from_vector<int64_t>(v, shape); }

struct Case {
  std::string name;
  GradcheckFn fn;
  In inputs;
  GradcheckOptions options = {};
};

// Probabilities kept away from 0 and 1, where the bce derivative is steep.
constexpr RandomInputOptions kProb{.low = 0.1, .high = 0.9};
constexpr RandomInputOptions kUnit{.low = 0.0, .high = 1.0};
// |x - y| and smooth_l1's |x - y| = beta kinks: inputs from disjoint ranges keep every difference
// away from 0 and from beta = 0.5 (x in [1.2, 2], y in [-0.3, 0.3]: differences in [0.9, 2.3]) in one
// case; the other case uses a large beta so every difference lies in the quadratic zone.
constexpr RandomInputOptions kHigh{.low = 1.2, .high = 2.0};
constexpr RandomInputOptions kSmall{.low = -0.3, .high = 0.3};

std::vector<Case> cases() {
  return {
      {"l1_mean", [](const In& x) { return l1_loss(x[0], x[1]); }, {rnd({3, 4}, 1, kHigh), rnd({3, 4}, 2, kSmall)}},
      {"l1_none",
       [](const In& x) { return l1_loss(x[0], x[1], Reduction::kNone); },
       {rnd({3, 4}, 3, kSmall), rnd({3, 4}, 4, kHigh)}},
      {"smooth_l1_linear_zone",
       [](const In& x) { return smooth_l1_loss(x[0], x[1], {.reduction = Reduction::kSum, .beta = 0.5}); },
       {rnd({3, 4}, 5, kHigh), rnd({3, 4}, 6, kSmall)}},
      {"smooth_l1_quadratic_zone",
       [](const In& x) { return smooth_l1_loss(x[0], x[1], {.reduction = Reduction::kNone, .beta = 10.0}); },
       {rnd({3, 4}, 7), rnd({3, 4}, 8)}},
      {"bce_mean",
       [](const In& x) { return binary_cross_entropy(x[0], x[1]); },
       {rnd({3, 4}, 9, kProb), rnd({3, 4}, 10, kUnit)}},
      {"bce_none",
       [](const In& x) { return binary_cross_entropy(x[0], x[1], Reduction::kNone); },
       {rnd({2, 5}, 11, kProb), rnd({2, 5}, 12, kUnit)}},
      {"bce_with_logits_mean",
       [](const In& x) { return binary_cross_entropy_with_logits(x[0], x[1]); },
       {rnd({3, 4}, 13, {.low = -4, .high = 4}), rnd({3, 4}, 14, kUnit)}},
      {"bce_with_logits_none",
       [](const In& x) { return binary_cross_entropy_with_logits(x[0], x[1], Reduction::kNone); },
       {rnd({4, 3}, 15, {.low = -4, .high = 4}), rnd({4, 3}, 16, kUnit)}},
      {"logsumexp_dim", [](const In& x) { return logsumexp(x[0], {1}); }, {rnd({3, 4, 2}, 17)}},
      {"logsumexp_dims_keep",
       [](const In& x) {
         return logsumexp(x[0], {0, 2}, KeepDim::kYes);
       },
       {rnd({3, 4, 2}, 18)}},
      {"logsumexp_all", [](const In& x) { return logsumexp(x[0], {}); }, {rnd({3, 4}, 19)}},
      {"prod_all", [](const In& x) { return prod(x[0]); }, {rnd({2, 3}, 20)}},
      {"prod_dim", [](const In& x) { return prod(x[0], 1, KeepDim::kYes); }, {rnd({3, 4, 2}, 21)}},
      // A zero in a slice: the gradient is the product of the others (no division by the zero).
      {"prod_with_zero",
       [](const In& x) {
         return prod(x[0] * f64({1, 0, 1, 1, 1, 1}, {2, 3}), 1);
       },
       {rnd({2, 3}, 22)}},
      {"norm_2", [](const In& x) { return norm(x[0]); }, {rnd({3, 4}, 23)}},
      {"norm_1_dim",
       [](const In& x) { return norm(x[0], {.p = 1.0, .dims = {1}}); },
       {rnd({3, 4}, 24, {.low = -2, .high = 2, .min_abs = 0.05})}},
      {"norm_3_dims",
       [](const In& x) {
         return norm(x[0], {.p = 3.0, .dims = {0, 2}, .keepdim = KeepDim::kYes});
       },
       {rnd({2, 3, 4}, 25, {.low = -2, .high = 2, .min_abs = 0.05})}},
      // Distinct random values: a unique max |x| per slice, where max is differentiable.
      {"norm_inf", [](const In& x) { return norm(x[0], {.p = INFINITY, .dims = {1}}); }, {rnd({3, 5}, 26)}},
      {"cumsum_0", [](const In& x) { return cumsum(x[0], 0); }, {rnd({4, 3}, 27)}},
      {"cumsum_last", [](const In& x) { return cumsum(x[0], -1); }, {rnd({2, 3, 4}, 28)}},
      {"dot", [](const In& x) { return dot(x[0], x[1]); }, {rnd({5}, 29), rnd({5}, 30)}},
      {"addcmul_broadcast",
       [](const In& x) { return addcmul(x[0], x[1], x[2], 0.7); },
       {rnd({3, 1}, 31), rnd({3, 4}, 32), rnd({4}, 33)}},
      {"addcdiv_broadcast",
       [](const In& x) { return addcdiv(x[0], x[1], x[2], -1.3); },
       {rnd({4}, 34), rnd({3, 4}, 35), rnd({3, 1}, 36, {.low = 0.5, .high = 2.0})}},
      {"conv1d",
       [](const In& x) { return conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .dilation = 2}); },
       {rnd({2, 4, 9}, 37), rnd({3, 4, 3}, 38), rnd({3}, 39)}},
      {"conv1d_groups_unbatched",
       [](const In& x) { return conv1d(x[0], x[1], Tensor(), {.groups = 2}); },
       {rnd({4, 6}, 40), rnd({2, 2, 2}, 41)}},
      {"group_norm",
       [](const In& x) { return group_norm(x[0], 2, x[1], x[2]); },
       {rnd({2, 4, 3}, 42), rnd({4}, 43), rnd({4}, 44)}},
      {"group_norm_no_affine",
       [](const In& x) { return group_norm(x[0], 3, Tensor(), Tensor()); },
       {rnd({2, 3, 2, 2}, 45)}},
      {"scatter_add_repeated_index",
       [](const In& x) {
         return scatter_add(x[0], 1, i64({0, 2, 0, 1, 1, 1}, {2, 3}), x[1]);
       },
       {rnd({2, 4}, 46), rnd({2, 3}, 47)}},
      {"index_put_replace",
       [](const In& x) {
         return index_put(x[0], i64({3, 0}, {2}), x[1]);
       },
       {rnd({4, 3}, 48), rnd({2, 3}, 49)}},
      {"index_put_accumulate_broadcast",
       [](const In& x) {
         return index_put(x[0], i64({1, 1, 2}, {3}), x[1], IndexPutMode::kAccumulate);
       },
       {rnd({4, 3}, 50), rnd({3}, 51)}},
  };
}

class PolicyOpsGradcheck : public ::testing::TestWithParam<Case> {};

TEST_P(PolicyOpsGradcheck, MatchesCentralDifferences) {
  const Case& c = GetParam();
  EXPECT_TRUE(gradcheck(c.fn, c.inputs, c.options));
}

INSTANTIATE_TEST_SUITE_P(All, PolicyOpsGradcheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// f64 values below are computed by hand; 1e-12 absorbs the last-bit differences of log/exp in f64.
constexpr double kTol = 1e-12;

TEST(PolicyOps, LossValues) {
  const Tensor x = f64({0.5, 0.9, 0.0, 1.0}), y = f64({1.0, 0.0, 1.0, 0.0});
  // -log 0.5, -log 0.1, and the two saturated terms clamped at 100, as PyTorch.
  const std::vector<double> bce = values_f64(binary_cross_entropy(x, y, Reduction::kNone));
  EXPECT_NEAR(bce[0], std::log(2.0), kTol);
  EXPECT_NEAR(bce[1], -std::log(0.1), kTol);
  EXPECT_EQ(bce[2], 100.0);
  EXPECT_EQ(bce[3], 100.0);
  const Tensor logits = f64({-3.0, 0.0, 2.5, 40.0}), t = f64({0.0, 1.0, 0.3, 1.0});
  const std::vector<double> fused = values_f64(binary_cross_entropy_with_logits(logits, t, Reduction::kNone));
  for (int i = 0; i < 4; ++i) {
    const double z = values_f64(logits)[i], yv = values_f64(t)[i], s = 1.0 / (1.0 + std::exp(-z));
    // At z = 40, 1 - sigmoid(z) underflows against 1 in f64: compare with the stable form there.
    const double ref = i == 3 ? std::log1p(std::exp(-z)) : -(yv * std::log(s) + (1 - yv) * std::log(1 - s));
    EXPECT_NEAR(fused[i], ref, 1e-12) << i;
  }
  const Tensor a = f64({1.0, -2.0, 0.25}), b = f64({0.5, 1.0, 0.0});
  EXPECT_NEAR(l1_loss(a, b).item(), (0.5 + 3.0 + 0.25) / 3, kTol);
  EXPECT_NEAR(l1_loss(a, b, Reduction::kSum).item(), 3.75, kTol);
  // beta 1: |d| = 0.5 and 0.25 are quadratic (0.125, 0.03125), |d| = 3 is linear (2.5).
  EXPECT_NEAR(smooth_l1_loss(a, b, {.reduction = Reduction::kSum}).item(), 0.125 + 2.5 + 0.03125, kTol);
  EXPECT_NEAR(smooth_l1_loss(a, b, {.reduction = Reduction::kSum, .beta = 0.0}).item(), 3.75, kTol);
}

TEST(PolicyOps, LossErrors) {
  try {
    binary_cross_entropy(f64({0.5, 1.5}), f64({1.0, 0.0}));
    FAIL() << "expected an error for an input outside [0, 1]";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("binary_cross_entropy: input element 1 is 1.5"), std::string::npos) << msg;
  }
  EXPECT_THROW(l1_loss(f64({1, 2}), f64({1, 2, 3})), Error);
  EXPECT_THROW(smooth_l1_loss(f64({1}), f64({1}), {.beta = -1.0}), Error);
}

TEST(PolicyOps, ReductionValues) {
  const Tensor x = f64({1.0, 2.0, 3.0, -4.0, 0.5, 2.0}, {2, 3});
  EXPECT_EQ(values_f64(prod(x)), std::vector<double>{-24.0});
  EXPECT_EQ(values_f64(prod(x, 1)), (std::vector<double>{6.0, -4.0}));
  EXPECT_EQ(prod(x, 0, KeepDim::kYes).shape(), (Shape{1, 3}));
  EXPECT_EQ(values_f64(cumsum(x, 1)), (std::vector<double>{1, 3, 6, -4, -3.5, -1.5}));
  EXPECT_EQ(values_f64(cumsum(x, 0)), (std::vector<double>{1, 2, 3, -3, 2.5, 5}));
  EXPECT_NEAR(norm(x).item(), std::sqrt(1 + 4 + 9 + 16 + 0.25 + 4), kTol);
  EXPECT_EQ(values_f64(norm(x, {.p = 1.0, .dims = {1}})), (std::vector<double>{6.0, 6.5}));
  EXPECT_EQ(values_f64(norm(x, {.p = INFINITY, .dims = {1}})), (std::vector<double>{3.0, 4.0}));
  EXPECT_NEAR(norm(x, {.p = 3.0}).item(), std::cbrt(1 + 8 + 27 + 64 + 0.125 + 8), kTol);
  // Stable: exp(1000) overflows, logsumexp does not.
  EXPECT_NEAR(logsumexp(f64({1000.0, 1000.0}), {0}).item(), 1000.0 + std::log(2.0), kTol);
  EXPECT_EQ(logsumexp(f64({-INFINITY, -INFINITY}), {0}).item(), -INFINITY);
  const std::vector<double> lse = values_f64(logsumexp(x, {1}));
  EXPECT_NEAR(lse[0], std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), kTol);
}

TEST(PolicyOps, GradientsAtZero) {
  // norm: zero norm -> zero gradient (a subgradient, as PyTorch), not nan.
  Tensor z = zeros({3}, {.dtype = DType::kF64, .requires_grad = true});
  norm(z).backward();
  EXPECT_EQ(values_f64(z.grad()), (std::vector<double>{0, 0, 0}));
  // prod with two zeros: every partial product contains a zero.
  Tensor p = f64({0.0, 2.0, 0.0, 3.0});
  p.set_requires_grad(true);
  prod(p).backward();
  EXPECT_EQ(values_f64(p.grad()), (std::vector<double>{0, 0, 0, 0}));
  Tensor q = f64({0.0, 2.0, 5.0});
  q.set_requires_grad(true);
  prod(q).backward();
  EXPECT_EQ(values_f64(q.grad()), (std::vector<double>{10, 0, 0}));
}

TEST(PolicyOps, PointwiseAndDotValues) {
  const Tensor s = f64({1, 2}), a = f64({3, 4}), b = f64({2, 8});
  EXPECT_EQ(values_f64(addcmul(s, a, b, 0.5)), (std::vector<double>{4, 18}));
  EXPECT_EQ(values_f64(addcdiv(s, a, b, 2.0)), (std::vector<double>{4, 3}));
  EXPECT_EQ(dot(a, b).item(), 38.0);
  EXPECT_EQ(dot(a, b).dim(), 0);
  // 16-bit: products summed in fp32 and rounded once (bf16 cannot hold 257; 256 + 1 rounds to 256).
  const Tensor ones16 = ones({257}, {.dtype = DType::kBF16});
  EXPECT_EQ(dot(ones16, ones16).item(), 256.0);
  EXPECT_EQ(dot(ones16, ones16).dtype(), DType::kBF16);
  EXPECT_THROW(dot(a, b.to(DType::kF32)), Error);                      // one dtype, as torch.dot
  EXPECT_THROW(dot(a, f64({1, 2, 3})), Error);                         // lengths differ
  EXPECT_THROW(dot(f64({1, 2}, {1, 2}), f64({1, 2}, {1, 2})), Error);  // not 1-D
}

TEST(PolicyOps, Conv1dAndGroupNormMatchTheirDefinitions) {
  // conv1d: y[o, l] = sum_c,k w[o, c, k] x[c, l + k], checked by hand on [1, 1, 4] with a [1, 1, 2] kernel.
  const Tensor x = f64({1, 2, 3, 4}, {1, 1, 4}), w = f64({1, -1}, {1, 1, 2});
  EXPECT_EQ(values_f64(conv1d(x, w, f64({0.5}))), (std::vector<double>{-0.5, -0.5, -0.5}));
  // group_norm with one channel per group and no affine: each [H, W] plane normalized on its own.
  const Tensor g = group_norm(f64({1, 3, 10, 30}, {1, 2, 2}), 2);
  const std::vector<double> gv = values_f64(g);
  const double r = 1.0 / std::sqrt(1.0 + 1e-5), r100 = 10.0 / std::sqrt(100.0 + 1e-5);
  EXPECT_NEAR(gv[0], -r, 1e-12);
  EXPECT_NEAR(gv[1], r, 1e-12);
  EXPECT_NEAR(gv[2], -r100, 1e-12);
  EXPECT_NEAR(gv[3], r100, 1e-12);
  EXPECT_THROW(group_norm(f64({1, 2, 3}, {1, 3}), 2), Error);  // 2 groups do not divide 3 channels
}

TEST(PolicyOps, ScatterAddValues) {
  const Tensor out =
      scatter_add(zeros({2, 3}, {.dtype = DType::kF64}), 1, i64({0, 0, 2, 1}, {2, 2}), f64({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(values_f64(out), (std::vector<double>{3, 0, 0, 0, 4, 3}));
  EXPECT_THROW(scatter_add(zeros({2, 3}, {.dtype = DType::kF64}), 1, i64({3}, {1, 1}), f64({1}, {1, 1})), Error);
  EXPECT_THROW(scatter_add(zeros({2, 3}), 1, i64({0}, {1, 1}), f64({1}, {1, 1})), Error);  // f32 vs f64
}

TEST(PolicyOps, IndexPutValues) {
  const Tensor x = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(values_f64(index_put(x, i64({2, 0}, {2}), f64({9, 8}))), (std::vector<double>{9, 8, 3, 4, 9, 8}));
  EXPECT_EQ(values_f64(index_put(x, i64({1, 1}, {2}), f64({10, 20, 30, 40}, {2, 2}), IndexPutMode::kAccumulate)),
            (std::vector<double>{1, 2, 43, 64, 5, 6}));
  EXPECT_THROW(index_put(x, i64({3}, {1}), f64({1, 1})), Error);     // index out of range
  EXPECT_THROW(index_put(x, i64({0}, {1}), f64({1, 1, 1})), Error);  // values do not broadcast
}

}  // namespace
}  // namespace mantissa::testing
