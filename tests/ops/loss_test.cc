// cross_entropy, nll_loss, mse_loss: PyTorch golden values, the fused cross_entropy against the
// composed nll_loss(log_softmax(x)) in value and gradient, gradchecks, ignore_index semantics,
// 16-bit inputs, and the errors for bad targets.
#include "ops/loss/loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ops/softmax/softmax.h"
#include "tests/ops/nn_testing.h"

namespace mantissa {
namespace {

using testing::all_close;
using testing::check_golden;
using testing::gradcheck;
using testing::random_tensor;

Tensor labels_from(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }

TEST(Loss, CrossEntropyGolden) {
  testing::GoldenFile file("ops.h5");
  const std::vector<int64_t> labels = file.attr_i64_vector("/cross_entropy_mean", "labels");
  const Tensor target = from_vector<int64_t>(labels);
  auto op = [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target); };
  // f64: logsumexp and the mean in double; 1e-10 relative is the suite's bar.
  check_golden("cross_entropy_mean", 1, kFloat64, 1e-10, 1e-14, op);
  // f32: inputs rounded (6e-8), fast_expf (2 ulp), sums of 10 terms: a few 1e-7 relative; grads ~0.01.
  check_golden("cross_entropy_mean", 1, kFloat32, 1e-5, 1e-7, op);
}

TEST(Loss, MseGolden) {
  auto op = [](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); };
  check_golden("mse_mean", 2, kFloat64, 1e-10, 1e-14, op);
  // f32: the sum is accumulated in double; only input rounding (6e-8 relative) remains.
  check_golden("mse_mean", 2, kFloat32, 1e-6, 1e-7, op);
}

// Composed version: log_softmax over the class dim then nll_loss (each with its own backward).
Tensor composed(const Tensor& x, const Tensor& t, CrossEntropyOptions o) {
  return nll_loss(log_softmax(x, x.dim() == 1 ? 0 : 1), t, o);
}

TEST(Loss, FusedCrossEntropyEqualsComposed) {
  struct Case {
    Shape logits;
    std::vector<int64_t> target;
    Shape target_shape;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {0, 6, 3, -100, 3}, {5}},
      {{2, 4, 3}, {0, 1, 3, -100, 2, 2}, {2, 3}},              // [N, C, d1]
      {{2, 3, 2, 2}, {0, 1, 2, 2, 1, -100, 0, 0}, {2, 2, 2}},  // [N, C, d1, d2]
      {{6}, {4}, {}},                                          // unbatched [C] with a 0-d target
  };
  for (const Case& c : cases) {
    for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      SCOPED_TRACE(shape_str(c.logits) + " reduction " + std::to_string(static_cast<int>(r)));
      const CrossEntropyOptions o{.reduction = r};
      const Tensor t = labels_from(c.target, c.target_shape);
      const Tensor x1 = random_tensor(c.logits, 11, kFloat64, -4, 4).set_requires_grad(true);
      const Tensor x2 = x1.detach().clone().set_requires_grad(true);
      const Tensor fused = cross_entropy(x1, t, o), comp = composed(x2, t, o);
      // Same math in f64, different association: agreement to rounding (1e-14).
      EXPECT_TRUE(all_close(fused, comp, 1e-13, 1e-15));
      const Tensor g = random_tensor(fused.shape(), 12);
      fused.backward(g);
      comp.backward(g);
      EXPECT_TRUE(all_close(x1.grad(), x2.grad(), 1e-13, 1e-15));
    }
  }
}

TEST(Loss, FusedEqualsComposedInF32) {
  // f32: each path rounds differently (exp, log of the sum); values of O(1) agree to a few ulp.
  const Tensor t = labels_from({1, 0, 9, 4, -100, 4, 3, 2}, {8});
  const Tensor x1 = random_tensor({8, 10}, 13, kFloat32, -8, 8).set_requires_grad(true);
  const Tensor x2 = x1.detach().clone().set_requires_grad(true);
  const Tensor a = cross_entropy(x1, t), b = composed(x2, t, {});
  EXPECT_TRUE(all_close(a, b, 2e-6, 1e-7));
  a.backward();
  b.backward();
  EXPECT_TRUE(all_close(x1.grad(), x2.grad(), 1e-5, 1e-7));
}

TEST(Loss, Gradchecks) {
  const Tensor t = labels_from({2, 0, -100, 1, 2, 2}, {2, 3});
  const Tensor x = random_tensor({2, 3, 3}, 14);
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    SCOPED_TRACE(static_cast<int>(r));
    const CrossEntropyOptions o{.reduction = r};
    EXPECT_TRUE(gradcheck([&](const auto& in) { return cross_entropy(in[0], t, o); }, {x}));
    EXPECT_TRUE(gradcheck([&](const auto& in) { return nll_loss(in[0], t, o); }, {x}));
    // Non-contiguous logits: [N, d1, C] permuted into [N, C, d1].
    EXPECT_TRUE(gradcheck([&](const auto& in) { return cross_entropy(in[0].permute({0, 2, 1}), t, o); }, {x}));
    const Tensor a = random_tensor({3, 4}, 15), b = random_tensor({4, 3}, 16);
    EXPECT_TRUE(gradcheck([&](const auto& in) { return mse_loss(in[0], in[1].t(), r); }, {a, b}));
  }
}

TEST(Loss, MeanDividesByNonIgnoredCount) {
  // PyTorch: the mean is over the targets that are not ignore_index.
  const Tensor x = random_tensor({4, 3}, 17);
  const Tensor t = labels_from({0, 7, 2, 7}, {4});
  const CrossEntropyOptions ignore7{.ignore_index = 7};
  const double total = cross_entropy(x, t, {.reduction = Reduction::kSum, .ignore_index = 7}).item();
  EXPECT_NEAR(cross_entropy(x, t, ignore7).item(), total / 2, 1e-15);
  const std::vector<double> each =
      testing::values(cross_entropy(x, t, {.reduction = Reduction::kNone, .ignore_index = 7}));
  EXPECT_EQ(each[1], 0.0);
  EXPECT_EQ(each[3], 0.0);
  EXPECT_NEAR(each[0] + each[2], total, 1e-15);
  // All ignored: 0 / 0 = nan for the mean, as PyTorch.
  EXPECT_TRUE(std::isnan(cross_entropy(x, labels_from({7, 7, 7, 7}, {4}), ignore7).item()));
}

TEST(Loss, CrossEntropyByHand) {
  // One row, logits [0, ln 3]: p = [1/4, 3/4]; loss for class 1 = -ln(3/4); grad = p - onehot.
  const Tensor x = from_vector<double>({0.0, std::log(3.0)}, {1, 2}).set_requires_grad(true);
  const Tensor loss = cross_entropy(x, labels_from({1}, {1}));
  EXPECT_NEAR(loss.item(), -std::log(0.75), 1e-15);
  EXPECT_EQ(loss.dim(), 0);
  loss.backward();
  EXPECT_TRUE(all_close(x.grad(), from_vector<double>({0.25, -0.25}, {1, 2}), 1e-15, 1e-15));
}

TEST(Loss, SixteenBit) {
  // f16/bf16 logits compute in fp32: the loss equals the f32 loss on the widened logits, rounded once.
  const Tensor t = labels_from({3, 1, 0, 2}, {4});
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_tensor({4, 5}, 18, dt).set_requires_grad(true);
    const Tensor loss = cross_entropy(x, t);
    EXPECT_EQ(loss.dtype(), dt);
    EXPECT_EQ(loss.item(), cross_entropy(x.detach().to(kFloat32), t).to(dt).item());
    loss.backward();
    EXPECT_EQ(x.grad().dtype(), dt);
    const Tensor x32 = x.detach().to(kFloat32).set_requires_grad(true);
    cross_entropy(x32, t).backward();
    EXPECT_TRUE(all_close(x.grad(), x32.grad().to(dt), 0, 0));  // same fp32 math, one rounding
    const Tensor a = random_tensor({6}, 19, dt), b = random_tensor({6}, 20, dt);
    EXPECT_EQ(mse_loss(a, b).item(), mse_loss(a.to(kFloat32), b.to(kFloat32)).to(dt).item());
  }
}

TEST(Loss, OutOfRangeTargetNamesIndexAndClassCount) {
  const Tensor x = zeros({3, 10});
  const std::string msg = testing::error_of([&] { cross_entropy(x, labels_from({1, 12, 0}, {3})); });
  EXPECT_NE(msg.find("cross_entropy: target 12"), std::string::npos) << msg;
  EXPECT_NE(msg.find("10 classes"), std::string::npos) << msg;
  const std::string neg = testing::error_of([&] { nll_loss(x, labels_from({-1, 0, 0}, {3})); });
  EXPECT_NE(neg.find("nll_loss: target -1"), std::string::npos) << neg;
}

TEST(Loss, ShapeAndDtypeErrors) {
  const Tensor x = zeros({3, 10});
  const std::string shape = testing::error_of([&] { cross_entropy(x, labels_from({1, 2}, {2})); });
  EXPECT_NE(shape.find("needs a target of shape [3], got [2]"), std::string::npos) << shape;
  const std::string dtype = testing::error_of([&] { cross_entropy(x, zeros({3})); });
  EXPECT_NE(dtype.find("expected class-index targets of dtype i64, got f32"), std::string::npos) << dtype;
  const std::string mse = testing::error_of([&] { mse_loss(zeros({2, 3}), zeros({3, 2})); });
  EXPECT_NE(mse.find("mse_loss: input [2, 3] and target [3, 2] must have the same shape"), std::string::npos) << mse;
}

}  // namespace
}  // namespace mantissa
