// The second-derivative harness checked on itself (a create_graph gradient that lost part of its history must
// fail gradgradcheck), and ops whose backward cannot give second derivatives saying so, naming the op. The
// per-op second-derivative cases are gradgradcheck_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "framework/autograd.h"
#include "ops/elementwise/elementwise.h"
#include "ops/recompute/recompute.h"
#include "ops/reduce/reduce.h"
#include "tests/support/gradcheck.h"

namespace mantissa::testing {
namespace {

using In = std::vector<Tensor>;
Tensor rnd(const Shape& s, uint64_t seed) { return random_input(s, seed, {}); }

// ---- the harness itself must catch a create_graph gradient that is wrong or has no history ----

// y = x^2 whose backward returns 2 g x with history through g only: x's own contribution to the second
// derivative is lost, which is what a node computing with raw kernels would silently do.
struct HalfDifferentiableSquareBackward final : Node {
  SavedTensor self{this, "self"};
  std::string_view name() const override { return "HalfDifferentiableSquareBackward"; }
  bool supports_create_graph() const override { return true; }  // wrongly
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0] * self.get().detach() * 2.0}; }
};
Tensor half_differentiable_square(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x * x;
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<HalfDifferentiableSquareBackward>({&x});
    node->self = x;
    set_history(out, node);
  }
  return out;
}

TEST(Gradgradcheck, ReportsASecondDerivativeThatLostTheInputsHistory) {
  const auto r = gradgradcheck([](const In& x) { return half_differentiable_square(x[0]); }, {rnd({2, 3}, 1)},
                               {.layouts = {InputLayout::kContiguous}});
  ASSERT_FALSE(r);
  const std::string msg = r.message();
  EXPECT_NE(msg.find("input 0 [2, 3] (contiguous), element [0, 0]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("grad_output"), std::string::npos) << "the history through g is right: " << msg;
}

TEST(Gradgradcheck, PassesTheSameSquareWithFullHistory) {
  EXPECT_TRUE(gradgradcheck([](const In& x) { return x[0] * x[0]; }, {rnd({2, 3}, 1)}));
}

// ---- ops whose backward does not support create_graph yet say so, naming the op ----

TEST(CreateGraph, AnOpWithoutSupportIsNamedInTheError) {
  Tensor x = rnd({2, 3}, 2).set_requires_grad(true);
  // recompute's backward runs its own first-order backward of the segment: it is refused because the
  // gradient reaching it has history (it depends on x).
  auto segment = [](const In& in) { return In{tanh(in[0])}; };
  EXPECT_THAT(
      [&] { grad(sum(recompute(segment, {x})[0] * x), {x}, {.create_graph = true}); },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("RecomputeBackward does not support create_graph yet")));
  // Without create_graph the same gradient is fine.
  EXPECT_EQ(grad(sum(recompute(segment, {x})[0] * x), {x})[0].shape(), x.shape());
}

// cumsum and pow with a tensor exponent were refused before their backward recorded: the second
// derivative of a small scalar against the closed form. s = sum(cumsum(x) * x) over a row of 3:
// ds/dx_i = cumsum_i + sum_{j >= i} x_j, so d/dx_k of sum_i ds/dx_i = (k + 1) + (3 - k) = 4 for every k.
TEST(CreateGraph, CumsumSecondDerivativeMatchesTheClosedForm) {
  Tensor x = rnd({3}, 4).set_requires_grad(true);
  const Tensor gx = grad(sum(cumsum(x, 0) * x), {x}, {.create_graph = true})[0];
  ASSERT_TRUE(gx.requires_grad());
  const Tensor ggx = grad(sum(gx), {x})[0];
  for (double v : values_f64(ggx)) EXPECT_DOUBLE_EQ(v, 4.0);
}

}  // namespace
}  // namespace mantissa::testing
