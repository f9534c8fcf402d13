// call(module, args...), the public call of a module (PyTorch's module(x)): the hooks of a module of your own,
// whose forward does not go through call_hooked, run at every call through it, forward and backward; a
// built-in layer's hooks run once, not twice; Sequential calls its children through it; Tensor arguments are
// the hooks' inputs by position, others pass through.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/module.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "tests/support/record_calls.h"

namespace mantissa {
namespace {

using ::testing::ElementsAre;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// A module as a user writes one: its forward calls its child's forward and an op, and never call_hooked.
class Residual : public Module {
 public:
  explicit Residual(Generator* g)
      : fc(register_module("fc", std::make_shared<Linear>(4, 4, LinearOptions{.generator = g}))) {}
  std::string type_name() const override { return "Residual"; }
  Tensor forward(const Tensor& x) { return x + fc->forward(x); }
  std::shared_ptr<Linear> fc;
};

// Two tensors and a number in, two tensors out, again without call_hooked.
class Mix : public Module {
 public:
  std::string type_name() const override { return "Mix"; }
  std::vector<Tensor> forward(const Tensor& a, double weight, const Tensor& b) { return {a * weight + b, a * b}; }
};

using testing::record_calls;

TEST(ModuleCall, RunsTheHooksOfAModuleWhoseForwardDoesNotGoThroughCallHooked) {
  Generator g(1);
  Residual block(&g);
  const Tensor x = randn({2, 4}, {}, &g);
  std::vector<std::string> events;
  const std::vector<HookHandle> handles = record_calls(block, events);

  const Tensor y = call(block, x);
  EXPECT_THAT(events, ElementsAre("pre ", "pre fc", "fwd fc", "fwd "));
  EXPECT_TRUE(same_bits(y, x + linear(x, block.fc->weight, block.fc->bias)));

  // forward() itself is the module's own code: as PyTorch's module.forward(x), it runs no hook of the
  // module (its Linear's, which go through call_hooked, still run).
  events.clear();
  block.forward(x);
  EXPECT_THAT(events, ElementsAre("pre fc", "fwd fc"));
}

TEST(ModuleCall, HookReplacementsReachTheForwardAndTheCaller) {
  Generator g(2);
  Residual block(&g);
  const Tensor x = randn({2, 4}, {}, &g);
  Tensor seen;
  block.register_forward_pre_hook(
      [](Module&, const std::vector<Tensor>& in) -> HookResult { return std::vector<Tensor>{in[0] * 2.0}; });
  block.register_forward_hook([&](Module& m, const std::vector<Tensor>&, const std::vector<Tensor>& out) -> HookResult {
    EXPECT_EQ(&m, &block);
    seen = out[0];
    return std::vector<Tensor>{out[0] + 1.0};
  });
  const Tensor y = call(block, x);
  const Tensor x2 = x * 2.0;
  EXPECT_TRUE(same_bits(seen, x2 + linear(x2, block.fc->weight, block.fc->bias)));
  EXPECT_TRUE(same_bits(y, seen + 1.0));
}

TEST(ModuleCall, ABuiltInLayersHooksRunOnceAndItComputesWhatItsForwardDoes) {
  Generator g(3);
  Linear lin(4, 3, {.generator = &g});
  const Tensor x = randn({2, 4}, {}, &g);
  std::vector<std::string> events;
  const std::vector<HookHandle> handles = record_calls(lin, events);
  const Tensor a = call(lin, x);
  EXPECT_THAT(events, ElementsAre("pre ", "fwd "));
  events.clear();
  const Tensor b = lin.forward(x);
  EXPECT_THAT(events, ElementsAre("pre ", "fwd "));
  EXPECT_TRUE(same_bits(a, b));
}

TEST(ModuleCall, WithoutHooksItIsTheForward) {
  Generator g(4);
  Residual block(&g);
  const Tensor x = randn({3, 4}, {}, &g);
  const Tensor y = call(block, x);
  EXPECT_TRUE(same_bits(y, block.forward(x)));
}

TEST(ModuleCall, SequentialRunsTheHooksOfAModuleOfYourOwn) {
  Generator g(5);
  Sequential seq(std::make_shared<Linear>(4, 4, LinearOptions{.generator = &g}), std::make_shared<Residual>(&g),
                 std::make_shared<ReLU>());
  std::vector<std::string> events;
  const std::vector<HookHandle> handles = record_calls(seq, events);
  seq.forward(ones({1, 4}));
  EXPECT_THAT(events, ElementsAre("pre ", "pre 0", "fwd 0", "pre 1", "pre 1.fc", "fwd 1.fc", "fwd 1", "pre 2", "fwd 2",
                                  "fwd "));
}

TEST(ModuleCall, TensorArgumentsAreTheHookInputsByPositionAndOthersPassThrough) {
  Mix mix;
  const Tensor a = from_vector<float>({1, 2}, {2}), b = from_vector<float>({10, 20}, {2});
  std::vector<Tensor> pre_inputs, fwd_outputs;
  mix.register_forward_pre_hook([&](Module&, const std::vector<Tensor>& in) -> HookResult {
    pre_inputs = in;
    return std::vector<Tensor>{in[0], in[1] * 2.0};  // b doubled
  });
  mix.register_forward_hook(
      [&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>& out) { fwd_outputs = out; });
  const std::vector<Tensor> out = call(mix, a, 3.0, b);
  ASSERT_EQ(pre_inputs.size(), 2u) << "the number is not a hook input";
  EXPECT_TRUE(pre_inputs[0].is_same(a));
  EXPECT_TRUE(pre_inputs[1].is_same(b));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(same_bits(out[0], from_vector<float>({23, 46}, {2})));  // a * 3 + 2b
  EXPECT_TRUE(same_bits(out[1], from_vector<float>({20, 80}, {2})));  // a * 2b
  ASSERT_EQ(fwd_outputs.size(), 2u);
  EXPECT_TRUE(fwd_outputs[1].is_same(out[1]));
}

TEST(ModuleCall, BackwardHooksOfAModuleOfYourOwnRunOnce) {
  Generator g(6);
  Residual block(&g);
  const Tensor x = randn({2, 4}, {}, &g).set_requires_grad(true);
  int pre = 0, full = 0;
  Tensor grad_in;
  block.register_full_backward_pre_hook([&](Module&, const std::vector<Tensor>&) { ++pre; });
  block.register_full_backward_hook([&](Module&, const std::vector<Tensor>& gin, const std::vector<Tensor>&) {
    ++full;
    grad_in = gin.at(0);
  });
  sum(call(block, x)).backward();
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(full, 1);
  ASSERT_TRUE(grad_in.defined());
  EXPECT_TRUE(same_bits(grad_in, x.grad()));
}

TEST(ModuleCall, NestedCallsEachRunTheirOwnModulesHooks) {
  // An outer module of your own that calls an inner one through call(), and a built-in layer directly.
  class Outer : public Module {
   public:
    explicit Outer(Generator* g)
        : inner(register_module("inner", std::make_shared<Residual>(g))),
          head(register_module("head", std::make_shared<Linear>(4, 2, LinearOptions{.generator = g}))) {}
    Tensor forward(const Tensor& x) { return head->forward(call(*inner, x)); }
    std::shared_ptr<Residual> inner;
    std::shared_ptr<Linear> head;
  };
  Generator g(7);
  Outer outer(&g);
  std::vector<std::string> events;
  const std::vector<HookHandle> handles = record_calls(outer, events);
  call(outer, ones({1, 4}));
  EXPECT_THAT(events, ElementsAre("pre ", "pre inner", "pre inner.fc", "fwd inner.fc", "fwd inner", "pre head",
                                  "fwd head", "fwd "));
}

}  // namespace
}  // namespace mantissa
