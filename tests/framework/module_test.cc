// Module: dotted names in registration order, registration errors, train/eval, zero_grad, state_dict
// and load_state_dict (in place, with clear errors for missing/unexpected names and shape mismatches).
#include "framework/module.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> names(const std::vector<NamedTensor>& list) {
  std::vector<std::string> out;
  for (const auto& e : list) out.push_back(e.name);
  return out;
}

// A layer with a parameter registered before a buffer and a second parameter, to check ordering.
struct Leafy : Module {
  Tensor weight, stat, bias;
  explicit Leafy(int64_t n) {
    weight = register_parameter("weight", full({n, 2}, 1.0));
    stat = register_buffer("stat", zeros({n}));
    bias = register_parameter("bias", zeros({n}));
  }
  std::string type_name() const override { return "Leafy"; }
};

// encoder.layers.{0,1} and a head: the nesting of a small transformer.
struct Stack : Module {
  std::shared_ptr<Module> layers = std::make_shared<Module>();
  Stack() {
    layers->register_module("0", std::make_shared<Leafy>(3));
    layers->register_module("1", std::make_shared<Leafy>(4));
    register_module("layers", layers);
  }
};

struct Net : Module {
  Tensor scale;
  std::shared_ptr<Stack> encoder;
  std::shared_ptr<Leafy> head;
  Net() {
    scale = register_parameter("scale", ones({1}));
    encoder = register_module("encoder", std::make_shared<Stack>());
    head = register_module("head", std::make_shared<Leafy>(2));
  }
};

TEST(Module, DottedNamesInRegistrationOrder) {
  Net net;
  EXPECT_THAT(names(net.named_parameters()),
              ElementsAre("scale", "encoder.layers.0.weight", "encoder.layers.0.bias", "encoder.layers.1.weight",
                          "encoder.layers.1.bias", "head.weight", "head.bias"));
  EXPECT_THAT(names(net.named_buffers()), ElementsAre("encoder.layers.0.stat", "encoder.layers.1.stat", "head.stat"));
  // state_dict: each module's parameters, then its buffers, then its children (PyTorch's order).
  EXPECT_THAT(names(net.state_dict()),
              ElementsAre("scale", "encoder.layers.0.weight", "encoder.layers.0.bias", "encoder.layers.0.stat",
                          "encoder.layers.1.weight", "encoder.layers.1.bias", "encoder.layers.1.stat", "head.weight",
                          "head.bias", "head.stat"));
  const auto params = net.parameters();
  ASSERT_EQ(params.size(), 7u);
  EXPECT_TRUE(params[6].is_same(net.head->bias));  // the very handle the layer holds
  for (const auto& p : params) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_FALSE(net.head->stat.requires_grad());
  EXPECT_THAT(net.children().size(), 2u);
  EXPECT_EQ(net.child("head"), net.head);
  EXPECT_EQ(net.named_children()[0].first, "encoder");
}

TEST(Module, TiedParameterListedOnce) {
  Module m;
  Tensor w = m.register_parameter("w", zeros({2}));
  auto child = std::make_shared<Module>();
  child->register_parameter("tied", w);
  m.register_module("c", child);
  EXPECT_THAT(names(m.named_parameters()), ElementsAre("w"));
  EXPECT_THAT(names(m.state_dict()), ElementsAre("w", "c.tied"));  // state_dict keeps both, as PyTorch
}

TEST(Module, RegistrationErrors) {
  Module m;
  m.register_parameter("w", zeros({2}));
  m.register_module("sub", std::make_shared<Module>());
  EXPECT_THAT([&] { m.register_parameter("w", zeros({2})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'w' is already a parameter")));
  EXPECT_THAT([&] { m.register_buffer("sub", zeros({2})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'sub' is already a child module")));
  EXPECT_THAT([&] { m.register_parameter("a.b", zeros({2})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("contains '.'")));
  EXPECT_THAT([&] { m.register_parameter("", zeros({2})); }, ::testing::ThrowsMessage<Error>(HasSubstr("empty")));
  EXPECT_THAT([&] { m.register_parameter("i", zeros({2}, {.dtype = DType::kI64})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("must be floating, got i64")));
  Tensor leaf = ones({2}).set_requires_grad(true);
  EXPECT_THAT([&] { m.register_parameter("h", leaf * 2.0); },
              ::testing::ThrowsMessage<Error>(HasSubstr("has autograd history")));
  EXPECT_THAT([&] { m.register_module("null", std::shared_ptr<Module>()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'null' is null")));
  EXPECT_THAT([&] { m.child("nope"); }, ::testing::ThrowsMessage<Error>(HasSubstr("no child module 'nope'")));
}

TEST(Module, TrainEvalPropagates) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.encoder->layers->child("1")->is_training());
  EXPECT_FALSE(net.head->is_training());
  net.encoder->train();  // only the subtree
  EXPECT_FALSE(net.is_training());
  EXPECT_TRUE(net.encoder->layers->child("0")->is_training());
  EXPECT_FALSE(net.head->is_training());
}

TEST(Module, ZeroGradSetsGradsToNone) {
  Net net;
  Tensor loss = sum(net.head->weight * 3.0) + sum(net.scale);
  loss.backward();
  ASSERT_TRUE(net.head->weight.grad().defined());
  EXPECT_EQ(net.head->weight.grad().data<float>()[0], 3.0f);
  net.zero_grad();
  for (const auto& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
  // A fresh backward writes (not adds to) the grad.
  sum(net.head->weight * 2.0).backward();
  EXPECT_EQ(net.head->weight.grad().data<float>()[0], 2.0f);
}

TEST(Module, LoadStateDictCopiesInPlace) {
  Leafy src(3), dst(3);
  fill_(src.weight.detach(), 7.0);
  fill_(src.stat, 4.0);
  const Tensor handle = dst.weight;
  dst.load_state_dict(src.state_dict());
  EXPECT_TRUE(dst.weight.is_same(handle));  // the layer's handle (and an optimizer's) stays valid
  EXPECT_FALSE(dst.weight.shares_storage(src.weight));
  EXPECT_EQ(dst.weight.data<float>()[5], 7.0f);
  EXPECT_EQ(dst.stat.data<float>()[2], 4.0f);
  EXPECT_TRUE(dst.weight.requires_grad());
  // Values of another dtype are converted, as PyTorch's copy_.
  dst.load_state_dict(std::map<std::string, Tensor>{
      {"weight", full({3, 2}, 0.5, {.dtype = DType::kF64})}, {"bias", zeros({3})}, {"stat", zeros({3})}});
  EXPECT_EQ(dst.weight.dtype(), DType::kF32);
  EXPECT_EQ(dst.weight.data<float>()[0], 0.5f);
}

TEST(Module, LoadStateDictErrors) {
  Leafy m(3);
  std::map<std::string, Tensor> state{{"weight", full({3, 2}, 9.0)}, {"bias", zeros({3})}, {"extra", zeros({1})}};
  // Missing 'stat', unexpected 'extra': strict names both and copies nothing.
  EXPECT_THAT([&] { m.load_state_dict(state); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("missing names ['stat']"), HasSubstr("unexpected names ['extra']"))));
  EXPECT_EQ(m.weight.data<float>()[0], 1.0f);
  // Non-strict loads what matches and reports the rest.
  LoadResult r = m.load_state_dict(state, LoadStrictness::kNonStrict);
  EXPECT_THAT(r.missing, ElementsAre("stat"));
  EXPECT_THAT(r.unexpected, ElementsAre("extra"));
  EXPECT_EQ(m.weight.data<float>()[0], 9.0f);
  // A shape mismatch names the entry and both shapes, even when not strict.
  state["weight"] = zeros({2, 3});
  EXPECT_THAT([&] { m.load_state_dict(state, LoadStrictness::kNonStrict); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("shape mismatch for 'weight'"), HasSubstr("[2, 3]"), HasSubstr("[3, 2]"))));
  EXPECT_THAT(
      [&] {
        m.load_state_dict(std::vector<NamedTensor>{{"bias", zeros({3})}, {"bias", zeros({3})}});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("'bias' appears twice")));
}

TEST(Module, PrintsTree) {
  Net net;
  const std::string s = net.str();
  EXPECT_THAT(s, HasSubstr("Module scale[1]"));
  EXPECT_THAT(s, HasSubstr("  encoder: Module"));
  EXPECT_THAT(s, HasSubstr("      1: Leafy weight[4, 2] bias[4]"));
}

}  // namespace
}  // namespace mantissa
