// MLP model: shapes, PyTorch-style parameter names, gradients, overfitting a tiny batch, bf16 autocast.
#include "models/mlp.h"

#include <gtest/gtest.h>

#include <cmath>

#include "amp/autocast.h"
#include "framework/random.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "tests/models/fit_support.h"

namespace mantissa {
namespace {

TEST(MlpModel, ShapesNamesAndCounts) {
  Generator g(1);
  MLP m(784, {256, 128}, 10, {.generator = &g});
  EXPECT_EQ(m.forward(randn({5, 784}, {}, &g)).shape(), (Shape{5, 10}));
  std::vector<std::string> names;
  int64_t count = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    names.push_back(name);
    count += p.numel();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias",
                                             "layers.4.weight", "layers.4.bias"}));
  EXPECT_EQ(count, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_THROW(m.forward(zeros({5, 783})), Error);
}

TEST(MlpModel, NoHiddenLayersIsOneLinear) {
  MLP m(4, {}, 3);
  ASSERT_EQ(m.named_parameters().size(), 2u);
  EXPECT_EQ(m.named_parameters()[0].name, "layers.0.weight");
}

TEST(MlpModel, GradientsReachEveryParameterAndTrainingReducesLoss) {
  Generator g(2);
  MLP m(16, {32, 32}, 4, {.generator = &g});
  const Tensor x = randn({8, 16}, {}, &g);
  const Tensor y = from_vector<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8});
  const auto [first, last] = testing::fit_fixed_batch(
      m, [&](const Tensor& in) { return m.forward(in); }, x, y, 1e-2, 50);
  // 8 points, 1900 parameters: Adam memorises them; ln(4) = 1.39 at the start.
  EXPECT_LT(last, 0.1 * first);
}

TEST(MlpModel, Bf16AutocastForward) {
  Generator g(3);
  MLP m(16, {32}, 4, {.generator = &g});
  const Tensor x = randn({8, 16}, {}, &g);
  const Tensor ref = m.forward(x);
  Tensor out;
  {
    amp::AutocastGuard guard({.dtype = DType::kBF16});
    out = m.forward(x);
  }
  EXPECT_EQ(out.dtype(), DType::kBF16);
  EXPECT_EQ(out.shape(), ref.shape());
  const Tensor o = out.to(DType::kF32).contiguous(), r = ref.contiguous();
  for (int64_t i = 0; i < r.numel(); ++i) {
    // bf16 keeps 8 significant bits (relative step 2^-8 = 0.004) per rounding, a few roundings deep.
    EXPECT_NEAR(o.data<float>()[i], r.data<float>()[i], 0.05 + 0.02 * std::abs(r.data<float>()[i])) << i;
  }
}

}  // namespace
}  // namespace mantissa
