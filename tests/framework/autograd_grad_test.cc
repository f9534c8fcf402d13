// grad() (torch.autograd.grad) and create_graph: gradients handed back without touching .grad, only the
// nodes that lead to an input run, the errors (an input that does not require grad, one no gradient
// reaches, a freed graph, a node without create_graph support), retain_graph's default, saved tensors
// freed without create_graph, higher-order gradients, and saved outputs that make no reference cycle.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/ops/op_test_support.h"

namespace mantissa {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

using testing::values;

Tensor leaf(std::vector<double> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector<double>(v, shape).set_requires_grad(true);
}

TEST(AutogradGrad, ReturnsGradientsAndLeavesDotGradAlone) {
  Tensor x = leaf({1, 2, 3}), w = leaf({4, 5, 6});
  const Tensor y = sum(x * w);
  const std::vector<Tensor> g = grad(y, {x, w});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(values(g[0]), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(values(g[1]), (std::vector<double>{1, 2, 3}));
  EXPECT_FALSE(g[0].requires_grad()) << "without create_graph the gradient has no history";
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

TEST(AutogradGrad, ANonLeafInputGetsTheGradientThatReachesIt) {
  Tensor x = leaf({1, 2});
  const Tensor h = x * 3.0;
  const Tensor y = sum(h * h);  // dy/dh = 2h = 6x
  const std::vector<Tensor> g = grad(y, {h, x});
  EXPECT_EQ(values(g[0]), (std::vector<double>{6, 12}));
  EXPECT_EQ(values(g[1]), (std::vector<double>{18, 36}));
}

TEST(AutogradGrad, GradOutputsWeighNonScalarOutputs) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  const Tensor y = x * x;
  EXPECT_THAT([&] { grad(y, {x}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("grad:"), HasSubstr("one-element"), HasSubstr(".grad_outputs"))));
  const std::vector<Tensor> g = grad(y, {x}, {.grad_outputs = {from_vector<double>({1, 0, -1, 0.5}, {2, 2})}});
  EXPECT_EQ(values(g[0]), (std::vector<double>{2, 0, -6, 4}));
  // Two outputs, their gradients summed at the input.
  const std::vector<Tensor> g2 = grad({sum(x), sum(x * 2.0)}, {x});
  EXPECT_EQ(values(g2[0]), (std::vector<double>{3, 3, 3, 3}));
  EXPECT_THAT(
      [&] {
        grad({sum(x), sum(x)}, {x}, {.grad_outputs = {Tensor()}});
      },
      ThrowsMessage<Error>(HasSubstr("2 outputs but 1 grad_outputs")));
}

TEST(AutogradGrad, InputThatDoesNotRequireGradIsAnError) {
  Tensor x = leaf({1, 2});
  const Tensor c = from_vector<double>({3, 4});
  const Tensor y = sum(x * c);
  EXPECT_THAT(
      [&] {
        grad(y, {x, c});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("grad: input 1"), HasSubstr("[2]"), HasSubstr("does not require grad"),
                                 HasSubstr("set_requires_grad(true)"))));
}

TEST(AutogradGrad, InputNotReachedIsAnErrorUnlessAllowUnused) {
  Tensor x = leaf({1, 2}), unused = leaf({3}), detached = leaf({5, 6});
  const Tensor y = sum(x * detached.detach());
  EXPECT_THAT(
      [&] {
        grad(y, {x, unused}, {.retain_graph = true});
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("grad: input 1"), HasSubstr("was not reached"), HasSubstr("allow_unused"))));
  EXPECT_THAT([&] { grad(y, {detached}, {.retain_graph = true}); },
              ThrowsMessage<Error>(HasSubstr("grad: input 0 (shape [2]) was not reached")));
  const std::vector<Tensor> g = grad(y, {x, unused, detached}, {.allow_unused = true});
  EXPECT_EQ(values(g[0]), (std::vector<double>{5, 6}));
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(g[2].defined());
}

TEST(AutogradGrad, SecondPassThroughAFreedGraphIsAnError) {
  Tensor x = leaf({1, 2, 3});
  const Tensor y = sum(x * x);
  grad(y, {x});
  EXPECT_THAT([&] { grad(y, {x}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("backward through the graph a second time"),
                                         HasSubstr("MulBackward"), HasSubstr("retain_graph"), HasSubstr("grad()"))));
  const Tensor z = sum(exp(x));
  z.backward();
  EXPECT_THAT([&] { grad(z, {x}); }, ThrowsMessage<Error>(HasSubstr("a second time")));
}

TEST(AutogradGrad, RetainGraphDefaultsToCreateGraph) {
  Tensor x = leaf({1, 2});
  const Tensor y = sum(exp(x) * x);
  const std::vector<Tensor> first = grad(y, {x}, {.create_graph = true});
  const std::vector<Tensor> again = grad(y, {x});  // the create_graph pass kept the graph
  EXPECT_EQ(values(first[0]), values(again[0]));
  EXPECT_THROW(grad(y, {x}), Error) << "the pass without create_graph freed it";
}

TEST(AutogradGrad, WithoutCreateGraphSavedTensorsAreFreed) {
  Tensor x = leaf({1, 2, 3});
  std::weak_ptr<Storage> saved_storage;
  Tensor y;
  {
    const Tensor a = x * 2.0;  // only the MulBackward below keeps it alive
    saved_storage = a.storage();
    y = sum(a * a);
  }
  ASSERT_FALSE(saved_storage.expired());
  const std::shared_ptr<Node> mul_node = y.grad_fn()->next_edges[0].fn;
  const std::vector<Tensor> g = grad(y, {x});
  EXPECT_EQ(values(g[0]), (std::vector<double>{8, 16, 24}));
  EXPECT_TRUE(mul_node->saved_released());
  EXPECT_TRUE(saved_storage.expired()) << "grad() without create_graph frees what the nodes saved";
}

TEST(AutogradGrad, CreateGraphGivesGradientsThatDifferentiateAgain) {
  Tensor x = leaf({0.5, -1, 2});
  const Tensor y = sum(x * x * x);
  const Tensor g1 = grad(y, {x}, {.create_graph = true})[0];  // 3x^2
  ASSERT_TRUE(g1.requires_grad());
  ASSERT_NE(g1.grad_fn(), nullptr);
  EXPECT_EQ(values(g1), (std::vector<double>{0.75, 3, 12}));
  const Tensor g2 = grad(sum(g1), {x}, {.create_graph = true})[0];  // 6x
  EXPECT_EQ(values(g2), (std::vector<double>{3, -6, 12}));
  const Tensor g3 = grad(sum(g2), {x}, {.retain_graph = true})[0];  // 6
  EXPECT_EQ(values(g3), (std::vector<double>{6, 6, 6}));
  // backward() through a create_graph gradient accumulates the second-order term into .grad.
  sum(g1 * g1).backward();  // d/dx sum(9x^4) = 36x^3
  EXPECT_EQ(values(x.grad()), (std::vector<double>{4.5, -36, 288}));
}

// loss.backward(create_graph=True): the leaves' grads keep their history; a second create_graph backward
// sums into them with history; a plain backward after them leaves a grad without history.
TEST(AutogradGrad, BackwardWithCreateGraphLeavesGradsThatDifferentiateAgain) {
  Tensor x = leaf({0.5, -1, 2});
  sum(x * x * x).backward(Tensor(), {.create_graph = true});  // x.grad = 3x^2
  ASSERT_TRUE(x.grad().requires_grad());
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0.75, 3, 12}));
  EXPECT_EQ(values(grad(sum(x.grad()), {x})[0]), (std::vector<double>{3, -6, 12}));  // 6x

  Tensor y = leaf({1, 2});
  const Tensor f = sum(y * y * y);
  f.backward(Tensor(), {.create_graph = true});
  f.backward(Tensor(), {.create_graph = true});  // the graph is kept: create_graph implies retain_graph
  ASSERT_TRUE(y.grad().requires_grad());
  EXPECT_EQ(values(y.grad()), (std::vector<double>{6, 24}));  // 2 * 3y^2
  // (retain_graph: the grads' graph shares the forward's saved tensors, which f.backward() needs again)
  EXPECT_EQ(values(grad(sum(y.grad()), {y}, {.retain_graph = true})[0]), (std::vector<double>{12, 24}));  // 12y
  f.backward();
  EXPECT_FALSE(y.grad().requires_grad()) << "a plain backward's sum has no history";
  EXPECT_EQ(values(y.grad()), (std::vector<double>{9, 36}));
}

TEST(AutogradGrad, GradientsMeetingInOneSlotAreSummedWithHistory) {
  Tensor x = leaf({1, 2});
  const Tensor a = x * x, b = exp(x);
  const Tensor y = sum(a * b);  // x feeds a and b: two gradients meet at x under create_graph
  const Tensor g = grad(y, {x}, {.create_graph = true})[0];  // (2x + x^2) e^x
  const Tensor gg = grad(sum(g), {x})[0];                    // (2 + 4x + x^2) e^x
  for (int i = 0; i < 2; ++i) {
    const double v = i + 1.0;
    EXPECT_NEAR(values(g)[i], (2 * v + v * v) * std::exp(v), 1e-12);
    EXPECT_NEAR(values(gg)[i], (2 + 4 * v + v * v) * std::exp(v), 1e-12);
  }
}

TEST(AutogradGrad, LeafHooksSeeTheGradientPostAccumulateHooksDoNot) {
  Tensor x = leaf({1, 2});
  int post_calls = 0;
  x.register_hook([](const Tensor& g) { return g * 10.0; });
  x.register_post_accumulate_grad_hook([&](Tensor&) { ++post_calls; });
  const std::vector<Tensor> g = grad(sum(x * 3.0), {x});
  EXPECT_EQ(values(g[0]), (std::vector<double>{30, 30}));
  EXPECT_EQ(post_calls, 0) << "nothing was accumulated (DDP's hooks are post-accumulate hooks)";
  EXPECT_FALSE(x.grad().defined());
}

// A node that fails the test if the engine runs it.
struct MustNotRunBackward final : Node {
  std::string_view name() const override { return "MustNotRunBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&&) override {
    ADD_FAILURE() << "grad() ran a node that leads to no input";
    return {Tensor()};
  }
};

TEST(AutogradGrad, OnlyNodesLeadingToAnInputRun) {
  Tensor x = leaf({1, 2}), w = leaf({3, 4});
  Tensor branch;
  {
    NoGradGuard no_grad;
    branch = w * 2.0;
  }
  set_history(branch, make_node<MustNotRunBackward>({&w}));
  const std::vector<Tensor> g = grad(sum(x * 5.0 + branch), {x});
  EXPECT_EQ(values(g[0]), (std::vector<double>{5, 5}));
  EXPECT_FALSE(w.grad().defined());
}

// y = 2x, recorded by a node that computes with a plain kernel and says so.
struct NoCreateGraphBackward final : Node {
  SavedTensor self{this, "self"};
  std::string_view name() const override { return "NoCreateGraphBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    NoGradGuard plain;
    return {g[0] * 2.0};
  }
};
Tensor times_two_no_create_graph(const Tensor& x, bool save_input) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x * 2.0;
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<NoCreateGraphBackward>({&x});
    if (save_input) node->self = x;
    set_history(out, node);
  }
  return out;
}

TEST(AutogradGrad, CreateGraphThroughANodeWithoutSupportIsAnErrorNamingIt) {
  Tensor x = leaf({1, 2});
  // The incoming gradient has history (it depends on x): the result would need history.
  const Tensor y = sum(times_two_no_create_graph(x, false) * x);
  EXPECT_THAT([&] { grad(y, {x}, {.create_graph = true}); },
              ThrowsMessage<Error>(
                  AllOf(HasSubstr("NoCreateGraphBackward does not support create_graph yet"), HasSubstr("HINT"))));
  // A saved tensor with history makes the result need history too.
  const Tensor z = sum(times_two_no_create_graph(x, true));
  EXPECT_THAT([&] { grad(z, {x}, {.create_graph = true}); },
              ThrowsMessage<Error>(HasSubstr("NoCreateGraphBackward does not support create_graph yet")));
}

TEST(AutogradGrad, CreateGraphThroughANodeWithoutSupportIsFineWhenNothingNeedsHistory) {
  Tensor x = leaf({1, 2});
  // A constant incoming gradient and nothing saved: the result is a constant, correct without history.
  const Tensor y = sum(times_two_no_create_graph(x, false));
  const std::vector<Tensor> g = grad(y, {x}, {.create_graph = true});
  EXPECT_EQ(values(g[0]), (std::vector<double>{2, 2}));
  EXPECT_FALSE(g[0].requires_grad());
}

TEST(AutogradGrad, SavedOutputsMakeNoReferenceCycle) {
  Tensor x = leaf({0.5, 1.5});
  std::weak_ptr<Node> exp_node;
  {
    const Tensor y = exp(x);  // ExpBackward saves its own output
    exp_node = y.grad_fn();
    const Tensor g = grad(sum(y * y), {x}, {.create_graph = true})[0];  // 2 e^{2x}
    const Tensor gg = grad(sum(g), {x})[0];                             // 4 e^{2x}
    EXPECT_NEAR(values(gg)[0], 4 * std::exp(1.0), 1e-12);
    EXPECT_FALSE(exp_node.expired());
  }
  EXPECT_TRUE(exp_node.expired()) << "the graph, and the gradients' graph, are freed with their tensors";
}

TEST(AutogradGrad, SavedOutputIsRecognisedWhenSavedBeforeSetHistory) {
  // tanh saves its output before recording it; the second derivative needs that output's history:
  // d2/dx2 tanh(x) = -2 tanh(x) (1 - tanh(x)^2).
  Tensor x = leaf({0.3, -0.7});
  const Tensor g = grad(sum(tanh(x)), {x}, {.create_graph = true})[0];
  const Tensor gg = grad(sum(g), {x})[0];
  for (int i = 0; i < 2; ++i) {
    const double v = i == 0 ? 0.3 : -0.7, t = std::tanh(v);
    EXPECT_NEAR(values(gg)[i], -2 * t * (1 - t * t), 1e-12);
  }
}

TEST(AutogradGrad, CastNodeCarriesGradientsBothWays) {
  // An f32 master cast to f16, as autocast does for weights: the create_graph gradient comes back in
  // f32 through a cast node, and the second backward crosses the casts again down to the master.
  Tensor master = from_vector<float>({0.5f, 1.0f, 2.0f}).set_requires_grad(true);
  const Tensor h = master.to(DType::kF16);
  const Tensor y = sum(h * h * h);  // every value exact in f16
  const Tensor g = grad(y, {master}, {.create_graph = true})[0];
  EXPECT_EQ(g.dtype(), DType::kF32);
  ASSERT_TRUE(g.requires_grad());
  EXPECT_EQ(values(g), (std::vector<double>{0.75, 3, 12}));  // 3x^2
  sum(g * g).backward();                                     // d/dx 9x^4 = 36x^3
  ASSERT_TRUE(master.grad().defined());
  EXPECT_EQ(master.grad().dtype(), DType::kF32);
  EXPECT_EQ(values(master.grad()), (std::vector<double>{4.5, 36, 288}));
}

TEST(AutogradGrad, ArgumentErrors) {
  Tensor x = leaf({1});
  EXPECT_THAT([&] { grad(std::vector<Tensor>{}, {x}); }, ThrowsMessage<Error>(HasSubstr("no outputs")));
  EXPECT_THAT([&] { grad(sum(x), {}); }, ThrowsMessage<Error>(HasSubstr("no inputs")));
  Tensor constant = from_vector<double>({1.0});
  EXPECT_THAT([&] { grad(constant * 2.0, {x}); },
              ThrowsMessage<Error>(AllOf(HasSubstr("grad: output 0"), HasSubstr("does not require grad"))));
}

}  // namespace
}  // namespace mantissa
