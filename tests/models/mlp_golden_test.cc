// The MLP of tests/golden/mlp_sgd.h5 trained for 10 SGD-momentum steps, against PyTorch 1.13:
// Linear(20,16)-ReLU-Linear(16,16)-ReLU-Linear(16,5), weights loaded by their state_dict names, batch t
// is x[t], y[t]. Losses before every step, the step-0 gradients and the final weights must agree.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/loss/loss.h"
#include "optim/sgd.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

using testing::GoldenFile;

// Tolerance. Both sides compute in float32 but sum in different orders (GEMM blocking, the log-sum-exp
// and mean reductions), so each result is within a few ulps (~1e-7 relative) of the exact value, and ten
// steps of lr 0.1 and momentum 0.9 carry such differences forward without amplifying them much. A tensor
// agrees when (a) its norm-wise relative error ||got - want|| / ||want|| is below 1e-5, and (b) every
// entry is within 1e-5 of |want_i| + 0.1 max|want|. The floor in (b) is needed: a gradient entry 500x
// smaller than its tensor's largest is a sum of larger terms that nearly cancel, and PyTorch's own
// float32 answer for it is off by up to 2.4e-5 of itself (measured against the same step in float64),
// so no float32 implementation could meet 1e-5 of that entry alone. What we measure is about 1e-6;
// a real mistake (a wrong formula, a transposed weight, a missed bias, a wrong first momentum step)
// is off by 1e-2 or more.
constexpr double kRelTol = 1e-5;

// The larger of the two errors described above, for `got` (f32) against PyTorch's `want`.
double rel_error(const Tensor& got, const std::vector<float>& want) {
  EXPECT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  const Tensor g = got.contiguous();
  const float* p = g.data<float>();
  double scale = 0.0, diff2 = 0.0, want2 = 0.0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  double elementwise = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = want[i], d = std::abs(p[i] - w);
    diff2 += d * d;
    want2 += w * w;
    elementwise = std::max(elementwise, d / (std::abs(w) + 0.1 * scale));
  }
  return std::max(elementwise, want2 > 0.0 ? std::sqrt(diff2 / want2) : std::sqrt(diff2));
}

TEST(MlpGolden, TenSgdMomentumStepsMatchPyTorch) {
  GoldenFile f("mlp_sgd.h5");
  Sequential model(std::make_shared<Linear>(20, 16), std::make_shared<ReLU>(), std::make_shared<Linear>(16, 16),
                   std::make_shared<ReLU>(), std::make_shared<Linear>(16, 5));
  std::map<std::string, Tensor> init;
  for (const auto& name : f.members("/init")) init[name] = f.tensor("/init/" + name, DType::kF32);
  ASSERT_EQ(init.size(), 6u);
  model.load_state_dict(init);  // strict: the names are exactly PyTorch's 0.weight ... 4.bias

  SGD sgd(model.named_parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor xs = f.tensor("/x", DType::kF32), ys = f.tensor("/y", DType::kI64);
  const std::vector<float> want_loss = f.f32("/loss");
  ASSERT_EQ(xs.size(0), 10);
  double worst_loss = 0.0, worst_grad = 0.0, worst_weight = 0.0;
  for (int64_t t = 0; t < 10; ++t) {
    Tensor loss = cross_entropy(model.forward(xs.select(0, t)), ys.select(0, t));
    const double err = std::abs(loss.item() - want_loss[t]) / std::abs(want_loss[t]);
    EXPECT_LT(err, kRelTol) << "loss before step " << t << ": " << loss.item() << " vs " << want_loss[t];
    worst_loss = std::max(worst_loss, err);
    sgd.zero_grad();
    loss.backward();
    if (t == 0) {
      for (const auto& [name, p] : model.named_parameters()) {
        const double e = rel_error(p.grad(), f.f32("/grad0/" + name));
        EXPECT_LT(e, kRelTol) << "step-0 gradient of " << name;
        worst_grad = std::max(worst_grad, e);
      }
    }
    sgd.step();
  }
  for (const auto& [name, p] : model.named_parameters()) {
    const double e = rel_error(p, f.f32("/final/" + name));
    EXPECT_LT(e, kRelTol) << "final " << name;
    worst_weight = std::max(worst_weight, e);
  }
  // What we measure, in the XML report (--gtest_output=xml).
  RecordProperty("worst_loss_rel_error", absl::StrFormat("%.2e", worst_loss));
  RecordProperty("worst_grad_rel_error", absl::StrFormat("%.2e", worst_grad));
  RecordProperty("worst_weight_rel_error", absl::StrFormat("%.2e", worst_weight));
}

}  // namespace
}  // namespace mantissa
