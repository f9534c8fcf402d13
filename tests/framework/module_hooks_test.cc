// Module forward hooks (PyTorch semantics): pre-hooks replacing inputs, forward hooks replacing outputs,
// registration order, removal through the handle (during a call too), containers seeing their children's
// calls in order (Sequential, GPT), the dtypes under autocast, named_modules(), and a module without hooks
// computing exactly what it computed before.
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
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "tests/support/record_calls.h"

namespace mantissa {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

std::vector<std::string> paths(const std::vector<NamedModule>& list) {
  std::vector<std::string> out;
  for (const auto& m : list) out.push_back(m.name);
  return out;
}

using testing::record_calls;

TEST(ModuleHooks, PreHookReplacesTheInputs) {
  Generator g(1);
  Linear lin(4, 3, {.generator = &g});
  const Tensor x = randn({2, 4}, {}, &g);
  Tensor seen;
  lin.register_forward_pre_hook([&](Module& m, const std::vector<Tensor>& in) -> HookResult {
    EXPECT_EQ(&m, &lin);
    seen = in.at(0);
    return std::vector<Tensor>{in[0] * 2.0};
  });
  const Tensor y = lin.forward(x);
  EXPECT_TRUE(seen.is_same(x)) << "the pre-hook sees the argument itself";
  EXPECT_TRUE(same_bits(y, linear(x * 2.0, lin.weight, lin.bias)));
}

TEST(ModuleHooks, ForwardHookReplacesTheOutput) {
  Generator g(2);
  Linear lin(4, 3, {.generator = &g});
  const Tensor x = randn({2, 4}, {}, &g);
  Tensor first_out, second_saw;
  lin.register_forward_hook([&](Module&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) -> HookResult {
    EXPECT_TRUE(in.at(0).is_same(x));
    first_out = out.at(0);
    return std::vector<Tensor>{out[0] + 1.0};
  });
  lin.register_forward_hook([&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>& out) {
    second_saw = out.at(0);  // returns void: looks only
  });
  const Tensor y = lin.forward(x);
  EXPECT_TRUE(same_bits(first_out, linear(x, lin.weight, lin.bias)));
  EXPECT_TRUE(second_saw.is_same(y)) << "a later hook sees the replacement, which is what forward returns";
  EXPECT_TRUE(same_bits(y, first_out + 1.0));
}

TEST(ModuleHooks, RunInRegistrationOrderEachSeeingThePreviousReplacement) {
  ReLU relu_layer;
  std::vector<std::string> events;
  for (int i = 0; i < 3; ++i) {
    relu_layer.register_forward_pre_hook([&events, i](Module&, const std::vector<Tensor>& in) -> HookResult {
      events.push_back("pre" + std::to_string(i) + " " + std::to_string(in[0].item()));
      return std::vector<Tensor>{in[0] + 1.0};
    });
  }
  int calls = 0;  // a stateful hook keeps its state across calls: the module never copies it
  relu_layer.register_forward_hook(
      [&events, count = 0](Module&, const std::vector<Tensor>&, const std::vector<Tensor>& out) mutable {
        events.push_back("fwd count " + std::to_string(++count) + " " + std::to_string(out[0].item()));
      });
  relu_layer.register_forward_hook([&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) { ++calls; });
  relu_layer.forward(full({}, -2.0));
  relu_layer.forward(full({}, -2.0));
  EXPECT_THAT(events, ElementsAre("pre0 -2.000000", "pre1 -1.000000", "pre2 0.000000", "fwd count 1 1.000000",
                                  "pre0 -2.000000", "pre1 -1.000000", "pre2 0.000000", "fwd count 2 1.000000"));
  EXPECT_EQ(calls, 2);
}

TEST(ModuleHooks, HandleRemovesOnceAndOutlivesItsModule) {
  ReLU relu_layer;
  int calls = 0;
  HookHandle h = relu_layer.register_forward_hook(
      [&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) { ++calls; });
  relu_layer.forward(ones({2}));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(relu_layer.has_hooks());
  h.remove();
  EXPECT_FALSE(relu_layer.has_hooks());
  relu_layer.forward(ones({2}));
  EXPECT_EQ(calls, 1);
  h.remove();  // twice: nothing happens
  HookHandle().remove();

  HookHandle outliving;
  {
    auto temporary = std::make_shared<ReLU>();
    outliving = temporary->register_forward_pre_hook([](Module&, const std::vector<Tensor>&) {});
  }
  outliving.remove();  // the module is gone: nothing happens
}

// PyTorch runs each list from a copy taken when the list is reached (list(self._forward_hooks.values())):
// a hook removed during the call still runs in it if it was due, and not in the next call.
TEST(ModuleHooks, RemovalDuringACallTakesEffectFromTheNextCall) {
  ReLU relu_layer;
  std::vector<std::string> events;
  HookHandle self, later;
  self = relu_layer.register_forward_hook([&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {
    events.push_back("self");
    self.remove();  // removes itself
  });
  relu_layer.register_forward_hook([&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {
    events.push_back("remover");
    later.remove();  // removes a hook registered after it
  });
  later = relu_layer.register_forward_hook(
      [&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) { events.push_back("later"); });
  relu_layer.forward(ones({1}));
  relu_layer.forward(ones({1}));
  EXPECT_THAT(events, ElementsAre("self", "remover", "later", "remover"));
}

TEST(ModuleHooks, PreHookRemovingAForwardHookOrAddingOneActsOnThisCallsForwardHooksOnlyWhenTheyAreReached) {
  // The forward hooks' list is copied after the forward, so a pre-hook that removes one stops it at once,
  // while a hook that a forward hook adds waits for the next call.
  ReLU relu_layer;
  std::vector<std::string> events;
  HookHandle removed = relu_layer.register_forward_hook(
      [&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) { events.push_back("removed"); });
  relu_layer.register_forward_pre_hook([&](Module&, const std::vector<Tensor>&) {
    events.push_back("pre");
    removed.remove();
  });
  bool added = false;
  relu_layer.register_forward_hook([&](Module& m, const std::vector<Tensor>&, const std::vector<Tensor>&) {
    events.push_back("adder");
    if (added) return;
    added = true;
    m.register_forward_hook(
        [&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) { events.push_back("added"); });
  });
  relu_layer.forward(ones({1}));
  relu_layer.forward(ones({1}));
  EXPECT_THAT(events, ElementsAre("pre", "adder", "pre", "adder", "added"));
}

TEST(ModuleHooks, ReplacementsMustKeepTheCountAndStayDefined) {
  Linear lin(2, 2);
  HookHandle h = lin.register_forward_pre_hook([](Module&, const std::vector<Tensor>& in) -> HookResult {
    return std::vector<Tensor>{in[0], in[0]};
  });
  try {
    lin.forward(ones({1, 2}));
    FAIL() << "two inputs for one";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Linear: a forward pre-hook returned 2 inputs for the 1 it was given"));
  }
  h.remove();
  lin.register_forward_hook([](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) -> HookResult {
    return std::vector<Tensor>{Tensor()};
  });
  try {
    lin.forward(ones({1, 2}));
    FAIL() << "an undefined output";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Linear: a forward hook returned an undefined tensor for outputs 0"));
  }
}

TEST(ModuleHooks, NamedModulesInPyTorchOrder) {
  MLP mlp(4, {5}, 3);
  EXPECT_THAT(paths(mlp.named_modules()), ElementsAre("", "layers", "layers.0", "layers.1", "layers.2"));
  EXPECT_EQ(mlp.named_modules()[2].module, mlp.layers->at<Linear>(0).get());

  GPT gpt({.vocab_size = 11, .n_layer = 1, .n_head = 2, .n_embd = 8, .block_size = 4});
  EXPECT_THAT(paths(gpt.named_modules()),
              ElementsAre("", "transformer", "transformer.wte", "transformer.wpe", "transformer.drop", "transformer.h",
                          "transformer.h.0", "transformer.h.0.ln_1", "transformer.h.0.attn",
                          "transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj",
                          "transformer.h.0.attn.attn_dropout", "transformer.h.0.attn.resid_dropout",
                          "transformer.h.0.ln_2", "transformer.h.0.mlp", "transformer.h.0.mlp.c_fc",
                          "transformer.h.0.mlp.c_proj", "transformer.h.0.mlp.dropout", "transformer.ln_f", "lm_head"));

  // A module reachable twice is listed once, under its first path, and its subtree is not walked again.
  Module root;
  auto shared = std::make_shared<Sequential>(std::make_shared<ReLU>());
  root.register_module("a", shared);
  root.register_module("b", shared);
  EXPECT_THAT(paths(root.named_modules()), ElementsAre("", "a", "a.0"));
}

TEST(ModuleHooks, SequentialHooksSeeTheChildrensCallsInOrder) {
  Sequential seq(std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(), std::make_shared<Linear>(3, 2));
  std::vector<std::string> events;
  const std::vector<HookHandle> handles = record_calls(seq, events);
  seq.forward(ones({1, 4}));
  EXPECT_THAT(events, ElementsAre("pre ", "pre 0", "fwd 0", "pre 1", "fwd 1", "pre 2", "fwd 2", "fwd "));
}

TEST(ModuleHooks, GptHooksSeeEveryCallInExecutionOrderAndItsTensors) {
  GPT gpt({.vocab_size = 11, .n_layer = 2, .n_head = 2, .n_embd = 8, .block_size = 4});
  std::vector<std::string> events;
  const std::vector<HookHandle> handles = record_calls(gpt, events);
  const Tensor idx = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  gpt.forward(idx, idx);

  // The plain containers (transformer, transformer.h, lm_head) have no forward, so their hooks never run,
  // as nn.ModuleDict's and nn.ModuleList's. With dropout 0 the attention uses the fused path, which does
  // not call attn_dropout.
  std::vector<std::string> expected{"pre "};
  const auto leaf = [&](const std::string& p) {
    expected.push_back("pre " + p);
    expected.push_back("fwd " + p);
  };
  leaf("transformer.wte");
  leaf("transformer.wpe");
  leaf("transformer.drop");
  for (const std::string b : {"transformer.h.0", "transformer.h.1"}) {
    expected.push_back("pre " + b);
    leaf(b + ".ln_1");
    expected.push_back("pre " + b + ".attn");
    leaf(b + ".attn.c_attn");
    leaf(b + ".attn.c_proj");
    leaf(b + ".attn.resid_dropout");
    expected.push_back("fwd " + b + ".attn");
    leaf(b + ".ln_2");
    expected.push_back("pre " + b + ".mlp");
    leaf(b + ".mlp.c_fc");
    leaf(b + ".mlp.c_proj");
    leaf(b + ".mlp.dropout");
    expected.push_back("fwd " + b + ".mlp");
    expected.push_back("fwd " + b);
  }
  leaf("transformer.ln_f");
  expected.push_back("fwd ");
  EXPECT_THAT(events, ElementsAreArray(expected));

  // The GPT's own hooks get {idx, targets} and {logits, loss}; a replaced loss comes back as the loss.
  std::vector<Tensor> seen_in, seen_out;
  gpt.register_forward_hook([&](Module&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) -> HookResult {
    seen_in = in;
    seen_out = out;
    return std::vector<Tensor>{out[0], out[1].defined() ? out[1] * 2.0 : out[1]};
  });
  const GPTOutput with = gpt.forward(idx, idx);
  ASSERT_EQ(seen_in.size(), 2u);
  EXPECT_TRUE(seen_in[0].is_same(idx) && seen_in[1].is_same(idx));
  ASSERT_EQ(seen_out.size(), 2u);
  EXPECT_TRUE(seen_out[0].is_same(with.logits));
  EXPECT_DOUBLE_EQ(with.loss.item(), 2.0 * seen_out[1].item());
  const GPTOutput without = gpt.forward(idx);  // no targets: undefined in both lists
  EXPECT_FALSE(seen_in[1].defined());
  EXPECT_FALSE(seen_out[1].defined());
  EXPECT_FALSE(without.loss.defined());
}

TEST(ModuleHooks, SeeTheAutocastDtypes) {
  Linear lin(8, 4);
  DType in_dtype = DType::kF64, out_dtype = DType::kF64;
  lin.register_forward_hook([&](Module&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
    in_dtype = in[0].dtype();
    out_dtype = out[0].dtype();
  });
  const Tensor x = randn({2, 8});
  {
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    lin.forward(x);
  }
  EXPECT_EQ(in_dtype, DType::kF32) << "the input as the caller gave it; autocast casts inside the op";
  EXPECT_EQ(out_dtype, DType::kBF16);
  lin.forward(x);
  EXPECT_EQ(out_dtype, DType::kF32) << "outside the guard";
}

TEST(ModuleHooks, WithoutHooksAModuleComputesExactlyWhatItComputedBefore) {
  Generator g(3);
  MLP mlp(6, {5}, 3, {.generator = &g});
  const Tensor x = randn({4, 6}, {}, &g);
  const auto l0 = mlp.layers->at<Linear>(0), l2 = mlp.layers->at<Linear>(2);
  // The same ops by hand: what forward computed before it went through call_hooked.
  const Tensor by_hand = linear(relu(linear(x, l0->weight, l0->bias)), l2->weight, l2->bias);
  EXPECT_TRUE(same_bits(mlp.forward(x), by_hand));

  // Hooks that only look change nothing; neither does removing them.
  std::vector<std::string> events;
  std::vector<HookHandle> handles = record_calls(mlp, events);
  for (const auto& [path, m] : mlp.named_modules()) {
    handles.push_back(
        m->register_full_backward_hook([](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {}));
  }
  EXPECT_TRUE(same_bits(mlp.forward(x), by_hand));
  EXPECT_FALSE(events.empty());
  for (HookHandle& h : handles) h.remove();
  for (const auto& [path, m] : mlp.named_modules()) EXPECT_FALSE(m->has_hooks()) << path;
  const Tensor y = mlp.forward(x);
  EXPECT_TRUE(same_bits(y, by_hand));
  EXPECT_EQ(y.grad_fn()->name(), by_hand.grad_fn()->name()) << "no hook node left in the graph";
}

}  // namespace
}  // namespace mantissa
