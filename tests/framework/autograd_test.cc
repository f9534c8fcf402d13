// The autograd engine's contracts: accumulation, shared inputs, freeing saved tensors and the second-backward
// error, retain_graph, grad mode, detach, requires_grad, hooks, non-scalar backward, deep graphs, and dtypes.
#include "framework/autograd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

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

TEST(Autograd, TwoBackwardPassesAccumulateIntoLeaves) {
  Tensor x = leaf({1, 2, 3});
  sum(x * 3.0).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3, 3, 3}));
  sum(x * x).backward();  // a new graph: adds 2x
  EXPECT_EQ(values(x.grad()), (std::vector<double>{5, 7, 9}));
}

TEST(Autograd, SharedInputGetsTheSumOfBothPaths) {
  Tensor x = leaf({-1.5, 2, 4});
  sum(x * x).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{-3, 4, 8}));
  // A diamond: x feeds a and b, both feed y.
  Tensor z = leaf({2});
  Tensor a = z * 3.0, b = exp(z);
  (a * b).backward(ones({1}, {.dtype = DType::kF64}));
  EXPECT_NEAR(values(z.grad())[0], 3 * std::exp(2.0) + 6 * std::exp(2.0), 1e-12);
}

TEST(Autograd, GradIsLeftUndefinedForLeavesNotReached) {
  Tensor x = leaf({1, 2}), unused = leaf({3, 4});
  sum(x).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(unused.grad().defined());
  Tensor mid = x * 2.0;
  sum(mid).backward();
  EXPECT_FALSE(mid.grad().defined()) << "non-leaves keep no .grad";
}

TEST(Autograd, SavedTensorsAreFreedAfterBackward) {
  Tensor x = leaf({1, 2, 3});
  std::weak_ptr<Storage> saved_storage;
  Tensor y;
  {
    Tensor a = x * 2.0;  // an intermediate that only the MulBackward below keeps alive
    saved_storage = a.storage();
    y = sum(a * a);
  }
  EXPECT_FALSE(saved_storage.expired()) << "the graph holds the saved intermediate until backward";
  const std::shared_ptr<Node> mul_node = y.grad_fn()->next_edges[0].fn;
  ASSERT_TRUE(mul_node);
  EXPECT_EQ(mul_node->name(), "MulBackward");
  y.backward();
  EXPECT_TRUE(mul_node->saved_released());
  EXPECT_TRUE(saved_storage.expired()) << "backward without retain_graph frees what the nodes saved";
}

TEST(Autograd, SecondBackwardThroughFreedGraphErrorsClearly) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = sum(x * x);
  y.backward();
  EXPECT_THAT([&] { y.backward(); }, ThrowsMessage<Error>(AllOf(HasSubstr("backward through the graph a second time"),
                                                                HasSubstr("MulBackward"), HasSubstr("retain_graph"))));
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = sum(exp(x) * x);
  y.backward({}, {.retain_graph = true});
  const std::vector<double> once = values(x.grad());
  y.backward();
  const std::vector<double> twice = values(x.grad());
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_NEAR(once[i], std::exp(i + 1.0) * (i + 2.0), 1e-12);
    EXPECT_DOUBLE_EQ(twice[i], 2 * once[i]);
  }
  EXPECT_THROW(y.backward(), Error) << "the second pass had no retain_graph, so the graph is now freed";
}

TEST(Autograd, NoGradGuardRecordsNoGraphAndRestores) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = x * x + 1.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_TRUE(y.is_leaf());
    {
      EnableGradGuard enable;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE(GradMode::is_enabled()) << "inner guard restored the outer state";
    EXPECT_THAT([&] { y.backward(); }, ThrowsMessage<Error>(HasSubstr("does not require grad")));
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_TRUE((x * x).requires_grad());
}

TEST(Autograd, DetachSharesStorageAndStopsGradients) {
  Tensor x = leaf({1, 2, 3});
  Tensor d = (x * 2.0).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  Tensor xd = x.detach();
  EXPECT_TRUE(xd.shares_storage(x));
  xd.data<double>()[0] = 10;
  EXPECT_EQ(x.data<double>()[0], 10) << "detach is a view, not a copy";
  sum(x * d).backward();  // d = 2x was computed before the write and is a constant: dx = d
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 4, 6}));
}

TEST(Autograd, RequiresGradPropagates) {
  Tensor a = leaf({1, 2});
  Tensor b = from_vector<double>({3, 4});
  EXPECT_TRUE(a.is_leaf());
  EXPECT_FALSE(b.requires_grad());
  Tensor c = a * b;
  EXPECT_TRUE(c.requires_grad());
  EXPECT_FALSE(c.is_leaf());
  EXPECT_NE(c.grad_fn(), nullptr);
  EXPECT_FALSE((b * b).requires_grad());
  EXPECT_TRUE(c.reshape({2, 1}).requires_grad()) << "views of tensors that require grad require grad";
  EXPECT_FALSE(gt(a, 0.0).requires_grad()) << "comparisons are not differentiable";
  sum(c).backward();
  EXPECT_FALSE(b.grad().defined());
  // Only the input that needs a gradient gets one.
  EXPECT_EQ(values(a.grad()), (std::vector<double>{3, 4}));
}

TEST(Autograd, SetRequiresGradOnlyOnFloatingLeaves) {
  Tensor a = leaf({1, 2});
  Tensor c = a * 2.0;
  EXPECT_THAT([&] { c.set_requires_grad(false); },
              ThrowsMessage<Error>(AllOf(HasSubstr("set_requires_grad"), HasSubstr("leaf"), HasSubstr("detach()"))));
  EXPECT_THAT(
      [] {
        from_vector<int64_t>({1, 2}).set_requires_grad(true);
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("set_requires_grad"), HasSubstr("i64"))));
  a.set_requires_grad(false);
  EXPECT_FALSE((a * 2.0).requires_grad());
}

TEST(Autograd, HookOnLeafReplacesItsGradient) {
  Tensor x = leaf({1, 2});
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 10.0;
  });
  sum(x * 3.0).backward();
  EXPECT_EQ(seen, (std::vector<double>{3, 3}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{30, 30}));
}

TEST(Autograd, HookOnNonLeafChangesWhatFlowsToItsInputs) {
  Tensor x = leaf({1, 2});
  Tensor mid = x * x;  // dmid/dx = 2x
  int calls = 0;
  mid.register_hook([&](const Tensor& g) {
    ++calls;
    return g * -1.0;
  });
  mid.register_hook([&](const Tensor&) { return Tensor(); });  // undefined: keeps the gradient
  sum(mid * 5.0).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{-10, -20}));
}

TEST(Autograd, PostAccumulateHooksSeeTheAccumulatedGradient) {
  Tensor w1 = leaf({1}), w2 = leaf({2});
  std::vector<std::string> order;
  std::vector<double> w1_grads;
  w1.register_post_accumulate_grad_hook([&](Tensor& t) {
    order.push_back("w1");
    w1_grads.push_back(values(t.grad())[0]);
  });
  w2.register_post_accumulate_grad_hook([&](Tensor&) { order.push_back("w2"); });
  Tensor x = from_vector<double>({3});
  sum((x * w1) * w2).backward();  // w2 is used last, so its gradient is ready first
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1"}));
  sum(x * w1).backward();
  EXPECT_EQ(w1_grads, (std::vector<double>{6, 9})) << "the hook runs after accumulation: 6, then 6 + 3";
  EXPECT_THAT([&] { (w1 * 2.0).register_post_accumulate_grad_hook([](Tensor&) {}); },
              ThrowsMessage<Error>(HasSubstr("only leaf tensors")));
}

TEST(Autograd, NonScalarBackwardNeedsAGradient) {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = x * x;
  EXPECT_THAT([&] { y.backward(); }, ThrowsMessage<Error>(AllOf(HasSubstr("one-element"), HasSubstr("[2, 2]"),
                                                                HasSubstr("backward(gradient)"))));
  y.backward(from_vector<double>({1, 0, -1, 0.5}, {2, 2}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 0, -6, 4}));
  // One-element outputs of any shape need no gradient.
  Tensor z = leaf({5});
  (z * z).reshape({1, 1}).backward();
  EXPECT_EQ(values(z.grad()), (std::vector<double>{10}));
}

TEST(Autograd, DeepChainBackpropagatesAndIsDestroyedWithoutRecursion) {
  constexpr int kDepth = 100000;
  Tensor x = from_vector<float>({1.0f}).set_requires_grad(true);
  Tensor y = x;
  for (int i = 0; i < kDepth; ++i) y = (i % 2 == 0) ? y * 2.0 : y * 0.5;  // exact in f32: grad stays 1
  y.backward();
  EXPECT_EQ(values(x.grad())[0], 1.0);
  y = Tensor();  // frees 100,000 nodes

  // A chain that never ran backward is destroyed just as safely.
  Tensor z = x;
  for (int i = 0; i < kDepth; ++i) z = z + 1.0;
  EXPECT_EQ(values(z)[0], kDepth + 1.0);
  z = Tensor();
  SUCCEED();
}

TEST(Autograd, LowPrecisionGradientsHaveTheTensorsDtype) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Tensor x = from_vector<float>({0.5f, -1.0f, 2.0f}, {3}, {.dtype = dt}).set_requires_grad(true);
    sum(x * x).to(DType::kF32).backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().dtype(), dt) << dtype_name(dt);
    EXPECT_EQ(values(x.grad()), (std::vector<double>{1, -2, 4})) << dtype_name(dt);
  }
}

TEST(Autograd, F32LeafCastToF16GetsAnF32Gradient) {
  Tensor master = from_vector<float>({0.25f, 3.0f}).set_requires_grad(true);
  Tensor half = master.to(DType::kF16);
  EXPECT_EQ(half.dtype(), DType::kF16);
  Tensor loss = sum(half * half);
  EXPECT_EQ(loss.dtype(), DType::kF16);
  loss.backward();
  ASSERT_TRUE(master.grad().defined());
  EXPECT_EQ(master.grad().dtype(), DType::kF32);
  EXPECT_EQ(values(master.grad()), (std::vector<double>{0.5, 6.0}));
}

// max(dim) records a node for its values only; the i64 indices carry no gradient.
TEST(Autograd, MaxValuesBackwardIgnoresTheIndicesOutput) {
  Tensor x = leaf({1, 5, 3, 7, 2, 0}, {2, 3});
  MaxResult r = max(x, 1);
  EXPECT_FALSE(r.indices.requires_grad());
  sum(r.values).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 0, 1, 0, 0}));
}

}  // namespace
}  // namespace mantissa
