// Optimizer base: param groups with their own options, zero_grad, and state_dict / load_state_dict (a
// resumed optimizer continues bit-exactly; bad state is refused naming the entry).
#include "optim/optimizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/error.h"
#include "framework/random.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/support/error_of.h"

namespace mantissa {
namespace {

using ::testing::HasSubstr;

std::vector<NamedTensor> make_params(uint64_t seed) {
  Generator gen(seed);
  return {{"0.weight", randn({4, 3}, {}, &gen).set_requires_grad(true)},
          {"0.bias", randn({4}, {}, &gen).set_requires_grad(true)}};
}

void set_grads(std::vector<NamedTensor>& params, uint64_t seed) {
  Generator gen(seed);
  for (auto& [name, p] : params) p.set_grad(randn(p.shape(), {}, &gen));
}

using testing::error_of;

TEST(Optimizer, GroupsHaveTheirOwnOptions) {
  auto params = make_params(1);
  Tensor w = params[0].tensor, b = params[1].tensor;
  const float b0 = b.data<float>()[0];
  SGD sgd({params[0]}, {.lr = 0.1});
  sgd.add_param_group({params[1]}, {.lr = 0.0});
  ASSERT_EQ(sgd.num_param_groups(), 2u);
  EXPECT_EQ(sgd.lr(1), 0.0);
  set_grads(params, 2);
  const float w0 = w.data<float>()[0], g0 = w.grad().data<float>()[0];
  sgd.step();
  EXPECT_EQ(w.data<float>()[0], std::fma(-0.1f, g0, w0));
  EXPECT_EQ(b.data<float>()[0], b0);  // lr 0 in its group
  sgd.set_lr(1, 0.5);
  EXPECT_EQ(sgd.options(1).lr, 0.5);
  // A parameter belongs to one group only.
  EXPECT_THAT(error_of([&] { sgd.add_param_group({params[0]}, {.lr = 0.1}); }), HasSubstr("'0.weight' is given twice"));
}

TEST(Optimizer, ZeroGradModes) {
  auto params = make_params(3);
  Adam adam(params, {});
  set_grads(params, 4);
  adam.zero_grad(ZeroGrad::kZero);
  ASSERT_TRUE(params[0].tensor.grad().defined());
  EXPECT_EQ(params[0].tensor.grad().data<float>()[5], 0.0f);
  adam.zero_grad();  // default: set to none
  EXPECT_FALSE(params[0].tensor.grad().defined());
  EXPECT_FALSE(params[1].tensor.grad().defined());
}

// Resume: an optimizer built fresh and loaded from state_dict() continues exactly as the original.
template <typename Opt, typename Options>
void check_resume(Options options) {
  auto a = make_params(5), b = make_params(5);
  Opt first(a, options);
  for (int t = 0; t < 3; ++t) {
    set_grads(a, 10 + t);
    first.step();
  }
  const OptimizerState saved = first.state_dict();
  for (size_t i = 0; i < a.size(); ++i) copy_(b[i].tensor, a[i].tensor);
  Opt resumed(b, {});  // default options: load_state_dict restores the saved ones
  resumed.load_state_dict(saved);
  EXPECT_EQ(resumed.options().lr, options.lr);
  for (int t = 3; t < 6; ++t) {
    set_grads(a, 10 + t);
    set_grads(b, 10 + t);
    first.step();
    resumed.step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    for (int64_t j = 0; j < a[i].tensor.numel(); ++j)
      ASSERT_EQ(a[i].tensor.data<float>()[j], b[i].tensor.data<float>()[j]) << a[i].name << "[" << j << "]";
  // The saved state is a copy: the three steps after saving did not change it.
  EXPECT_EQ(saved.tensors.at("0.weight/step").item<int64_t>(), 3);
}

TEST(Optimizer, ResumeFromStateDictIsBitExact) {
  check_resume<Adam>(AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
  check_resume<AdamW>(AdamWOptions{.lr = 0.02});
  check_resume<SGD>(SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
}

TEST(Optimizer, StateDictLayout) {
  auto params = make_params(6);
  Adam adam(params, {.lr = 0.01, .betas = {0.8, 0.95}});
  set_grads(params, 7);
  params[1].tensor.set_grad(Tensor());  // 0.bias has no grad: no state
  adam.step();
  const OptimizerState s = adam.state_dict();
  EXPECT_EQ(s.optimizer, "Adam");
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0].params, (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(s.groups[0].hyperparameters.at("beta1"), 0.8);
  EXPECT_EQ(s.groups[0].hyperparameters.at("amsgrad"), 0.0);
  std::vector<std::string> keys;
  for (const auto& [k, t] : s.tensors) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"0.weight/exp_avg", "0.weight/exp_avg_sq", "0.weight/step"}));
  EXPECT_EQ(s.tensors.at("0.weight/step").dtype(), DType::kI64);
}

TEST(Optimizer, LoadStateDictNamesWhatIsWrong) {
  auto params = make_params(8);
  Adam adam(params, {.lr = 0.01});
  set_grads(params, 9);
  adam.step();
  const OptimizerState good = adam.state_dict();
  auto fails_with = [&](OptimizerState s, const std::string& text) {
    const std::string before = adam.state("0.weight")->at("exp_avg").str();
    EXPECT_THAT(error_of([&] { adam.load_state_dict(s); }), HasSubstr(text));
    EXPECT_EQ(adam.state("0.weight")->at("exp_avg").str(), before);  // nothing changed
  };
  OptimizerState s = good;
  s.tensors.erase("0.bias/exp_avg_sq");
  fails_with(s, "entry '0.bias/exp_avg_sq' is missing");
  s = good;
  s.tensors["0.bias/momentum_buffer"] = zeros({4});
  fails_with(s, "unexpected entry '0.bias/momentum_buffer'");
  s = good;
  s.tensors["1.weight/step"] = zeros({}, {.dtype = DType::kI64});
  fails_with(s, "no parameter '1.weight'");
  s = good;
  s.tensors["0.weight/exp_avg"] = zeros({3, 4});
  fails_with(s, "entry '0.weight/exp_avg' is f32 [3, 4], expected f32 [4, 3]");
  s = good;
  s.groups[0].hyperparameters.erase("eps");
  fails_with(s, "hyperparameter 'eps' is missing");
  s = good;
  s.groups[0].hyperparameters["momentum"] = 0.9;
  fails_with(s, "unexpected hyperparameter 'momentum'");
  s = good;
  s.groups[0].params = {"0.bias", "0.weight"};
  fails_with(s, "param group 0 has parameters ['0.bias', '0.weight'] in the state");
  s = good;
  s.optimizer = "SGD";
  fails_with(s, "the state is from a 'SGD' optimizer");
}

TEST(Optimizer, RefusesBadParameters) {
  Tensor w = full({2}, 1.0).set_requires_grad(true);
  EXPECT_THAT(error_of([&] { SGD({{"a/b", w}}, {}); }), HasSubstr("no '/'"));
  EXPECT_THAT(error_of([&] {
                SGD({{"x", full({2}, 1.0, {.dtype = DType::kBF16}).set_requires_grad(true)}}, {});
              }),
              HasSubstr("'x' is bf16"));
  EXPECT_THAT(error_of([&] {
                SGD({{"c", full({2}, 1.0)}}, {});
              }),
              HasSubstr("must be a leaf tensor that requires grad"));
  EXPECT_THAT(error_of([&] {
                SGD({{"t", full({2, 3}, 1.0).t().set_requires_grad(true)}}, {});
              }),
              HasSubstr("not contiguous"));
}

}  // namespace
}  // namespace mantissa
