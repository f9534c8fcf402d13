// Module full backward hooks (PyTorch's register_full_backward_hook and register_full_backward_pre_hook):
// grad_inputs and grad_outputs equal the gradients of a hand-written equivalent, replacements flow on, an
// input that does not require grad (the data going into the first layer) has an undefined grad_input, and
// containers' hooks come after their children's, except when no input of the container needs a gradient.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/module.h"
#include "framework/random.h"
#include "models/gpt.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// A leaf with the same data as `t`, requiring grad: the input of the hand-written equivalent.
Tensor leaf_like(const Tensor& t) {
  Tensor leaf = t.detach();
  leaf.set_requires_grad(true);
  return leaf;
}

struct Captured {
  int calls = 0;
  std::vector<Tensor> grad_inputs, grad_outputs;
};

HookHandle capture(Module& m, Captured& c) {
  return m.register_full_backward_hook([&c](Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>& go) {
    ++c.calls;
    c.grad_inputs = gi;
    c.grad_outputs = go;
  });
}

// Two inputs and two outputs through the vector form of call_hooked: out0 = a * b + a, out1 = a * 3.
struct TwoByTwo : Module {
  std::string type_name() const override { return "TwoByTwo"; }
  std::vector<Tensor> forward(const Tensor& a, const Tensor& b) {
    return call_hooked({a, b}, [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{in[0] * in[1] + in[0], in[0] * 3.0};
    });
  }
};

TEST(ModuleBackwardHooks, GradInputsAndGradOutputsAreTheGradientsOfTheHandWrittenEquivalent) {
  Generator g(4);
  Linear lin(4, 3, {.generator = &g});
  const Tensor x = randn({2, 4}, {.requires_grad = true}, &g);
  const Tensor r = randn({2, 3}, {}, &g);  // d loss / d output
  Captured c;
  capture(lin, c);
  sum(lin.forward(x) * r).backward();
  ASSERT_EQ(c.calls, 1);

  const Tensor x2 = leaf_like(x);
  const std::vector<Tensor> by_hand = grad(sum(linear(x2, lin.weight, lin.bias) * r), {x2, lin.weight});
  ASSERT_EQ(c.grad_inputs.size(), 1u);
  ASSERT_EQ(c.grad_outputs.size(), 1u);
  EXPECT_TRUE(same_bits(c.grad_outputs[0], r)) << "d(sum(y * r))/dy is r";
  EXPECT_TRUE(same_bits(c.grad_inputs[0], by_hand[0]));
  EXPECT_TRUE(same_bits(x.grad(), by_hand[0]));
  EXPECT_TRUE(same_bits(lin.weight.grad(), by_hand[1]));
}

TEST(ModuleBackwardHooks, RunAgainForEachBackwardOfARetainedGraph) {
  Linear lin(3, 2);
  const Tensor x = randn({1, 3}, {.requires_grad = true});
  Captured c;
  capture(lin, c);
  const Tensor loss = sum(lin.forward(x));
  loss.backward({}, {.retain_graph = true});
  loss.backward();
  EXPECT_EQ(c.calls, 2);
}

TEST(ModuleBackwardHooks, AreTakenWhenTheForwardRunsAndMayRemoveThemselvesDuringBackward) {
  Linear lin(3, 2);
  const Tensor x = randn({1, 3}, {.requires_grad = true});
  Captured kept;
  HookHandle h = capture(lin, kept);
  int self_removing = 0;
  HookHandle self;
  self = lin.register_full_backward_hook([&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {
    ++self_removing;
    self.remove();
  });
  const Tensor loss = sum(lin.forward(x));
  h.remove();  // after the forward: as in PyTorch, this call's backward still runs it
  loss.backward();
  EXPECT_EQ(kept.calls, 1);
  EXPECT_EQ(self_removing, 1);
  sum(lin.forward(x)).backward();
  EXPECT_EQ(kept.calls, 1);
  EXPECT_EQ(self_removing, 1);
  EXPECT_FALSE(lin.has_hooks());
}

TEST(ModuleBackwardHooks, SeveralInputsAndOutputsWithUndefinedEntries) {
  TwoByTwo m;
  const Tensor a = randn({3}, {.requires_grad = true});
  const Tensor b = randn({3});  // data: no gradient
  Captured c;
  capture(m, c);
  const std::vector<Tensor> out = m.forward(a, b);
  sum(out[0]).backward();  // out[1] gets no gradient
  ASSERT_EQ(c.calls, 1);
  ASSERT_EQ(c.grad_outputs.size(), 2u);
  EXPECT_TRUE(same_bits(c.grad_outputs[0], ones({3})));
  EXPECT_FALSE(c.grad_outputs[1].defined()) << "an output no gradient reached is undefined, PyTorch's None";
  ASSERT_EQ(c.grad_inputs.size(), 2u);
  EXPECT_TRUE(same_bits(c.grad_inputs[0], b + 1.0)) << "d(a * b + a)/da";
  EXPECT_FALSE(c.grad_inputs[1].defined()) << "b does not require grad";
}

TEST(ModuleBackwardHooks, ReplacedGradInputsFlowToTheInputs) {
  Generator g(5);
  Linear lin(4, 3, {.generator = &g});
  const Tensor x = randn({2, 4}, {.requires_grad = true}, &g);
  const Tensor r = randn({2, 3}, {}, &g);
  lin.register_full_backward_hook([](Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>&) -> HookResult {
    return std::vector<Tensor>{gi[0] * 0.5};
  });
  Captured later;  // a second hook sees the first one's replacement
  capture(lin, later);
  sum(lin.forward(x) * r).backward();

  const Tensor x2 = leaf_like(x);
  const std::vector<Tensor> by_hand = grad(sum(linear(x2, lin.weight, lin.bias) * r), {x2, lin.weight});
  EXPECT_TRUE(same_bits(later.grad_inputs.at(0), by_hand[0] * 0.5));
  EXPECT_TRUE(same_bits(x.grad(), by_hand[0] * 0.5));
  EXPECT_TRUE(same_bits(lin.weight.grad(), by_hand[1])) << "the weights' gradients are the module's own business";
}

TEST(ModuleBackwardHooks, PreHookReplacesGradOutputs) {
  Generator g(6);
  Linear lin(4, 3, {.generator = &g});
  const Tensor x = randn({2, 4}, {.requires_grad = true}, &g);
  const Tensor r = randn({2, 3}, {}, &g);
  std::vector<Tensor> pre_saw;
  lin.register_full_backward_pre_hook([&](Module&, const std::vector<Tensor>& go) -> HookResult {
    pre_saw = go;
    return std::vector<Tensor>{go[0] * 2.0};
  });
  Captured c;
  capture(lin, c);
  sum(lin.forward(x) * r).backward();

  const Tensor x2 = leaf_like(x);
  const std::vector<Tensor> by_hand = grad(sum(linear(x2, lin.weight, lin.bias) * (r * 2.0)), {x2, lin.weight});
  EXPECT_TRUE(same_bits(pre_saw.at(0), r));
  EXPECT_TRUE(same_bits(c.grad_outputs.at(0), r * 2.0)) << "the full hook sees the replaced grad_outputs";
  EXPECT_TRUE(same_bits(x.grad(), by_hand[0]));
  EXPECT_TRUE(same_bits(lin.weight.grad(), by_hand[1]));
}

TEST(ModuleBackwardHooks, DataInputGetsAnUndefinedGradInputOnceTheGradOutputsAreKnown) {
  Generator g(7);
  Linear lin(4, 3, {.generator = &g});
  const Tensor x = randn({2, 4}, {}, &g);  // data, as into a first layer
  const Tensor r = randn({2, 3}, {}, &g);
  Captured c;
  HookHandle h = capture(lin, c);
  sum(lin.forward(x) * r).backward();
  ASSERT_EQ(c.calls, 1);
  ASSERT_EQ(c.grad_inputs.size(), 1u);
  EXPECT_FALSE(c.grad_inputs[0].defined());
  EXPECT_TRUE(same_bits(c.grad_outputs.at(0), r));
  const Tensor hooked_grad = lin.weight.grad();

  h.remove();
  lin.zero_grad();
  sum(lin.forward(x) * r).backward();
  EXPECT_TRUE(same_bits(lin.weight.grad(), hooked_grad)) << "the hook changed nothing";

  // No input to give a gradient to: a replacement is refused, as in PyTorch.
  lin.register_full_backward_hook([](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) -> HookResult {
    return std::vector<Tensor>{zeros({2, 4})};
  });
  try {
    sum(lin.forward(x) * r).backward();
    FAIL() << "a replacement grad_input where no input requires grad";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Linear: a full backward hook returned grad_inputs, but no input"));
  }
}

TEST(ModuleBackwardHooks, ReplacementGradientsMustMatchTheirTensors) {
  Linear lin(4, 3);
  const Tensor x = randn({2, 4}, {.requires_grad = true});
  lin.register_full_backward_hook([](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) -> HookResult {
    return std::vector<Tensor>{zeros({4})};
  });
  try {
    sum(lin.forward(x)).backward();
    FAIL() << "a grad_input of the wrong shape";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Linear: a full backward hook returned grad_inputs 0 as [4] f32"));
  }
}

TEST(ModuleBackwardHooks, ContainerHooksRunAfterTheChildrensUnlessNoInputNeedsAGradient) {
  Sequential seq(std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(), std::make_shared<Linear>(3, 2));
  std::vector<std::string> events;
  for (const auto& [path, m] : seq.named_modules()) {
    m->register_full_backward_hook(
        [&events, p = path](Module&, const std::vector<Tensor>& gi, const std::vector<Tensor>&) {
          events.push_back(p + (gi.at(0).defined() ? "" : " (no grad_input)"));
        });
  }
  sum(seq.forward(randn({2, 4}, {.requires_grad = true}))).backward();
  EXPECT_THAT(events, ElementsAre("2", "1", "0", ""));
  events.clear();
  // Data in: the Sequential's hook runs as soon as its grad_outputs are known, before its children's.
  sum(seq.forward(randn({2, 4}))).backward();
  EXPECT_THAT(events, ElementsAre(" (no grad_input)", "2", "1", "0 (no grad_input)"));
}

TEST(ModuleBackwardHooks, SeeTheAutocastDtypes) {
  Linear lin(8, 4);
  const Tensor x = randn({2, 8}, {.requires_grad = true});
  Captured c;
  capture(lin, c);
  Tensor y;
  {
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    y = lin.forward(x);
  }
  sum(y.to(DType::kF32)).backward();
  EXPECT_EQ(c.grad_outputs.at(0).dtype(), DType::kBF16) << "the gradient of a bf16 output";
  EXPECT_EQ(c.grad_inputs.at(0).dtype(), DType::kF32) << "the gradient of the f32 input, after the cast's backward";
}

TEST(ModuleBackwardHooks, UnderRecomputeABlocksForwardHooksRunTwiceAndItsBackwardHookOnce) {
  // Activation checkpointing runs the block again during backward (as PyTorch's reentrant checkpoint), and
  // the backward hooks are set up by that second run, the one with grad mode on.
  GPT gpt({.vocab_size = 11, .n_layer = 1, .n_head = 2, .n_embd = 8, .block_size = 4, .recompute = true});
  int forwards = 0;
  gpt.h[0]->register_forward_hook([&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) { ++forwards; });
  Captured c;
  capture(*gpt.h[0], c);
  const Tensor idx = from_vector<int64_t>({1, 2, 3}, {1, 3});
  gpt.forward(idx, idx).loss.backward();
  EXPECT_EQ(forwards, 2);
  EXPECT_EQ(c.calls, 1);
  EXPECT_TRUE(c.grad_inputs.at(0).defined());
}

}  // namespace
}  // namespace mantissa
