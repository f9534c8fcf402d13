// The fused GradScaler path: step(GradScaling{inv_scale, found_inf}) equals unscale_grads_ followed by
// step() bit for bit, and a step with found_inf set changes nothing (params, moments, step counts).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>

#include "amp/unscale_grads.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "optim/adam.h"
#include "optim/lion.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

std::vector<NamedTensor> make_params(DType dtype) {
  Generator gen(11);
  return {{"w", randn({64, 33}, {.dtype = dtype}, &gen).set_requires_grad(true)},
          {"b", randn({33}, {.dtype = dtype}, &gen).set_requires_grad(true)}};
}

// Scaled grads as a GradScaler's backward would leave them (the same values in both runs).
void set_scaled_grads(std::vector<NamedTensor>& params, int step, double scale) {
  Generator gen(100 + step);
  for (auto& [name, p] : params) {
    p.set_grad(mul(randn(p.shape(), {.dtype = p.dtype()}, &gen), scale));
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

void expect_same_state(const Optimizer& a, const Optimizer& b, const std::vector<NamedTensor>& pa,
                       const std::vector<NamedTensor>& pb, const std::string& what) {
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(same_bits(pa[i].tensor, pb[i].tensor)) << what << " " << pa[i].name;
  const auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size()) << what;
  for (const auto& [key, t] : sa.tensors) EXPECT_TRUE(same_bits(t, sb.tensors.at(key))) << what << " " << key;
}

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<NamedTensor>)>;

struct Case {
  const char* name;
  Factory make;
  DType dtype;
};

class FusedStep : public ::testing::TestWithParam<Case> {};

TEST_P(FusedStep, EqualsUnscaleThenStep) {
  auto pa = make_params(GetParam().dtype), pb = make_params(GetParam().dtype);
  auto a = GetParam().make(pa), b = GetParam().make(pb);
  // 1/3000 is not a power of two, so the unscaling product rounds: both paths must round it the same way.
  const Tensor inv_scale = scalar_tensor(static_cast<float>(1.0 / 3000.0));
  for (int t = 0; t < 4; ++t) {
    set_scaled_grads(pa, t, 3000.0);
    set_scaled_grads(pb, t, 3000.0);
    const Tensor found_a = scalar_tensor(0.0), found_b = scalar_tensor(0.0);
    unscale_grads_(*a, inv_scale, found_a);
    a->step();
    check_grads_finite_(*b, found_b);
    b->step({.inv_scale = inv_scale, .found_inf = found_b});
    EXPECT_EQ(found_a.item(), 0.0);
    EXPECT_EQ(found_b.item(), 0.0);
    expect_same_state(*a, *b, pa, pb, std::string(GetParam().name) + " step " + std::to_string(t));
  }
}

TEST_P(FusedStep, SkippedStepChangesNothing) {
  auto params = make_params(GetParam().dtype);
  auto opt = GetParam().make(params);
  const Tensor inv_scale = scalar_tensor(0.5);
  // A skipped first step leaves no state behind (state_dict is empty, as before).
  set_scaled_grads(params, 0, 2.0);
  if (GetParam().dtype == DType::kF32) {
    params[1].tensor.grad().data<float>()[3] = std::numeric_limits<float>::infinity();
  } else {
    params[1].tensor.grad().data<double>()[3] = std::numeric_limits<double>::quiet_NaN();
  }
  const Tensor found = scalar_tensor(0.0);
  check_grads_finite_(*opt, found);
  ASSERT_EQ(found.item(), 1.0);
  const Tensor w0 = params[0].tensor.clone();
  opt->step({.inv_scale = inv_scale, .found_inf = found});
  EXPECT_TRUE(same_bits(params[0].tensor, w0));
  EXPECT_TRUE(opt->state_dict().tensors.empty());
  // After two good steps, a skipped one leaves params, moments and step counts as they were.
  for (int t = 1; t <= 2; ++t) {
    set_scaled_grads(params, t, 2.0);
    opt->step({.inv_scale = inv_scale, .found_inf = scalar_tensor(0.0)});
  }
  const OptimizerState before = opt->state_dict();
  std::vector<Tensor> params_before;
  for (const auto& p : params) params_before.push_back(p.tensor.clone());
  set_scaled_grads(params, 3, 2.0);
  opt->step({.inv_scale = inv_scale, .found_inf = scalar_tensor(1.0)});
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(same_bits(params[i].tensor, params_before[i])) << params[i].name;
  const OptimizerState after = opt->state_dict();
  ASSERT_EQ(after.tensors.size(), before.tensors.size());
  for (const auto& [key, t] : before.tensors) EXPECT_TRUE(same_bits(t, after.tensors.at(key))) << key;
  EXPECT_EQ(after.tensors.at("w/step").item<int64_t>(), 2);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, FusedStep,
    ::testing::Values(
        Case{"sgd_nesterov_wd",
             [](std::vector<NamedTensor> p) {
               return std::make_unique<SGD>(
                   p, SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
             },
             DType::kF32},
        Case{"sgd_plain", [](std::vector<NamedTensor> p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1}); },
             DType::kF32},
        Case{"adam_amsgrad_wd",
             [](std::vector<NamedTensor> p) {
               return std::make_unique<Adam>(p, AdamOptions{.lr = 0.01, .weight_decay = 0.05, .amsgrad = true});
             },
             DType::kF32},
        Case{"adamw", [](std::vector<NamedTensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.01}); },
             DType::kF32},
        Case{"adamw_f64",
             [](std::vector<NamedTensor> p) { return std::make_unique<AdamW>(p, AdamWOptions{.lr = 0.01}); },
             DType::kF64},
        Case{"lion_wd",
             [](std::vector<NamedTensor> p) {
               return std::make_unique<Lion>(p, LionOptions{.lr = 0.01, .weight_decay = 0.1});
             },
             DType::kF32},
        Case{"lion_f64", [](std::vector<NamedTensor> p) { return std::make_unique<Lion>(p, LionOptions{.lr = 0.01}); },
             DType::kF64}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(FusedStep, RefusesBadScalingTensors) {
  Tensor w = full({2}, 1.0).set_requires_grad(true);
  SGD sgd({{"w", w}}, {.lr = 0.1});
  w.set_grad(full({2}, 1.0));
  EXPECT_THROW(sgd.step({.inv_scale = scalar_tensor(1.0, {.dtype = DType::kF64}), .found_inf = scalar_tensor(0.0)}),
               Error);
  EXPECT_THROW(sgd.step({.inv_scale = scalar_tensor(1.0)}), Error);  // found_inf undefined
}

}  // namespace
}  // namespace mantissa
