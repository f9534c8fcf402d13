// Lion against a reference written here from the paper's formula (Chen et al. 2023, Algorithm 2) in f64,
// over many steps with weight decay, for f32 and f64 parameters; its state, options and errors; the
// GradScaler driving it; and a checkpoint round trip (save, load, continue bit for bit).
#include "optim/lion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/temp_dir.h"
#include "train/checkpoint.h"

namespace mantissa {
namespace {

constexpr int kSteps = 30;

// The paper's step, in f64: c = beta1 m + (1 - beta1) g; p = p - lr (sign(c) + wd p);
// m = beta2 m + (1 - beta2) g. Returns the smallest |c| relative to the size of its two terms, the margin
// by which the test's sign decisions are safe from the implementation's rounding.
double reference_step(std::vector<double>& p, std::vector<double>& m, const std::vector<double>& g,
                      const LionOptions& o) {
  const double b1 = o.betas[0], b2 = o.betas[1];
  double margin = INFINITY;
  for (size_t i = 0; i < p.size(); ++i) {
    const double c = b1 * m[i] + (1.0 - b1) * g[i];
    margin = std::min(margin, std::abs(c) / (std::abs(b1 * m[i]) + std::abs((1.0 - b1) * g[i])));
    const double sign = c > 0.0 ? 1.0 : (c < 0.0 ? -1.0 : 0.0);
    p[i] = p[i] - o.lr * (sign + o.weight_decay * p[i]);
    m[i] = b2 * m[i] + (1.0 - b2) * g[i];
  }
  return margin;
}

std::vector<double> values_of(const Tensor& t) {
  const Tensor d = t.to(DType::kF64);
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

struct ReferenceCase {
  DType dtype;
  double tolerance;  // relative to |p| + lr: the two orders of the decay round differently, in the dtype
  double margin;     // the smallest |c| (relative) for which the dtype's rounding cannot flip sign(c)
};

class LionReference : public ::testing::TestWithParam<ReferenceCase> {};

TEST_P(LionReference, FollowsThePapersFormulaOverManySteps) {
  const auto [dtype, tolerance, margin] = GetParam();
  Generator gen(7);
  std::vector<NamedTensor> params = {{"w", randn({8, 9}, {.dtype = dtype}, &gen).set_requires_grad(true)},
                                     {"b", randn({9}, {.dtype = dtype}, &gen).set_requires_grad(true)}};
  const LionOptions o{.lr = 0.01, .betas = {0.9, 0.99}, .weight_decay = 0.5};
  Lion lion(params, o);
  std::vector<std::vector<double>> p_ref, m_ref;
  for (const auto& p : params) {
    p_ref.push_back(values_of(p.tensor));
    m_ref.emplace_back(p.tensor.numel(), 0.0);
  }
  for (int t = 0; t < kSteps; ++t) {
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor g = randn(params[k].tensor.shape(), {.dtype = dtype}, &gen);
      params[k].tensor.set_grad(g);
      const double smallest = reference_step(p_ref[k], m_ref[k], values_of(g), o);
      ASSERT_GT(smallest, margin) << "test data: a sign argument too near 0 at step " << t << "; change the seed";
    }
    lion.step();
    for (size_t k = 0; k < params.size(); ++k) {
      const std::vector<double> got = values_of(params[k].tensor),
                                got_m = values_of(lion.state(params[k].name)->at("exp_avg"));
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], p_ref[k][i], tolerance * (std::abs(p_ref[k][i]) + o.lr))
            << params[k].name << "[" << i << "] step " << t;
        ASSERT_NEAR(got_m[i], m_ref[k][i], tolerance * (std::abs(m_ref[k][i]) + 1.0))
            << params[k].name << " exp_avg[" << i << "] step " << t;
      }
    }
    EXPECT_EQ(lion.state("w")->at("step").item<int64_t>(), t + 1);
  }
}

// f32: a few roundings (6e-8 each) per step, and 1 - lr * wd and lr rounded to f32 once (the same error
// every step), over 30 steps; the margins are 20x the error of the momentum that decides the signs.
// f64: the same in double.
INSTANTIATE_TEST_SUITE_P(Dtypes, LionReference,
                         ::testing::Values(ReferenceCase{DType::kF32, 4e-6, 2e-5},
                                           ReferenceCase{DType::kF64, 1e-12, 1e-10}),
                         [](const auto& info) { return std::string(dtype_name(info.param.dtype)); });

TEST(Lion, StateNamesAndDefaults) {
  const LionOptions d{};
  EXPECT_EQ(d.lr, 1e-4);  // the reference implementation's defaults
  EXPECT_EQ(d.betas[0], 0.9);
  EXPECT_EQ(d.betas[1], 0.99);
  EXPECT_EQ(d.weight_decay, 0.0);
  Tensor w = full({3}, 1.0).set_requires_grad(true);
  Lion lion({{"w", w}}, {.lr = 0.1});
  EXPECT_EQ(lion.state("w"), nullptr);  // no state before the first step
  w.set_grad(full({3}, -0.5));
  lion.step();
  const ParamState* s = lion.state("w");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->size(), 2u);
  EXPECT_EQ(s->at("step").item<int64_t>(), 1);
  // First step from m = 0: sign(0.1 g) = -1, so p moves up by lr; m = 0.01 g.
  EXPECT_FLOAT_EQ(w.data<float>()[0], 1.1f);
  EXPECT_FLOAT_EQ(s->at("exp_avg").data<float>()[0], -0.005f);
  EXPECT_EQ(std::string(lion.type_name()), "Lion");
}

TEST(Lion, AZeroGradMovesOnlyThroughMomentumAndDecay) {
  Tensor w = full({2}, 2.0, {.dtype = DType::kF64}).set_requires_grad(true);
  Lion lion({{"w", w}}, {.lr = 0.1, .weight_decay = 0.5});
  w.set_grad(zeros({2}, {.dtype = DType::kF64}));
  lion.step();  // m = 0 and g = 0: sign(0) = 0, only the decay acts: 2 * (1 - 0.05)
  EXPECT_DOUBLE_EQ(w.data<double>()[0], 1.9);
}

TEST(Lion, RefusesBadOptionsAndSixteenBitParameters) {
  Tensor w = full({2}, 1.0).set_requires_grad(true);
  EXPECT_THROW(Lion({{"w", w}}, {.lr = -1.0}), Error);
  EXPECT_THROW(Lion({{"w", w}}, {.betas = {1.5, 0.99}}), Error);
  EXPECT_THROW(Lion({{"w", w}}, {.betas = {0.9, -0.1}}), Error);
  try {
    Lion({{"w", w}}, {.weight_decay = -0.1});
    FAIL() << "negative weight_decay accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Lion: invalid weight_decay"), std::string::npos) << e.what();
  }
  Tensor h = full({2}, 1.0, {.dtype = DType::kBF16}).set_requires_grad(true);
  EXPECT_THROW(Lion({{"h", h}}), Error);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// The GradScaler steps Lion as any optimizer: a power-of-two scale unscales exactly, so a scaled step
// equals a plain step on the true grads; an inf in the grads skips the step and changes nothing.
TEST(Lion, GradScalerStepsItAndSkipsOverflows) {
  Generator gen(3);
  const Tensor x = randn({5}, {}, &gen);
  Tensor a = randn({5}, {}, &gen).set_requires_grad(true);
  Tensor b = a.detach().clone().set_requires_grad(true);
  Lion scaled({{"w", a}}, {.lr = 0.01, .weight_decay = 0.1});
  Lion plain({{"w", b}}, {.lr = 0.01, .weight_decay = 0.1});
  amp::GradScaler scaler({.init_scale = 1024.0});
  for (int t = 0; t < 3; ++t) {
    scaled.zero_grad();
    plain.zero_grad();
    scaler.scale(sum(mul(mul(a, a), x))).backward();
    sum(mul(mul(b, b), x)).backward();
    EXPECT_TRUE(scaler.step(scaled));
    scaler.update();
    plain.step();
    EXPECT_TRUE(same_bits(a, b)) << "step " << t;
    EXPECT_TRUE(same_bits(scaled.state("w")->at("exp_avg"), plain.state("w")->at("exp_avg"))) << "step " << t;
  }
  const Tensor before = a.detach().clone(), m_before = scaled.state("w")->at("exp_avg").clone();
  scaled.zero_grad();
  scaler.scale(sum(mul(a, full({5}, INFINITY)))).backward();
  EXPECT_FALSE(scaler.step(scaled));
  scaler.update();
  EXPECT_TRUE(same_bits(a, before));
  EXPECT_TRUE(same_bits(scaled.state("w")->at("exp_avg"), m_before));
  EXPECT_EQ(scaled.state("w")->at("step").item<int64_t>(), 3);
}

// Saved in a checkpoint file after some steps, loaded into a fresh Lion over fresh parameters, and
// continued: the same parameters and momenta, bit for bit, as the run that never stopped.
TEST(Lion, CheckpointRoundTripContinuesBitForBit) {
  Generator gen(5);
  Tensor w = randn({4, 3}, {}, &gen).set_requires_grad(true);
  std::vector<Tensor> grads;
  for (int t = 0; t < 6; ++t) grads.push_back(randn({4, 3}, {}, &gen));
  const LionOptions o{.lr = 3e-3, .betas = {0.95, 0.98}, .weight_decay = 0.2};
  Lion lion({{"w", w}}, o);
  for (int t = 0; t < 3; ++t) {
    w.set_grad(grads[t]);
    lion.step();
  }
  testing::TempDir dir("lion_checkpoint");
  const std::string path = dir / "lion.h5";
  Checkpoint saved;
  saved.model = {{"w", w.detach().clone()}};
  saved.optimizer = lion.state_dict();
  saved.meta.precision = "fp32";
  ASSERT_TRUE(save_checkpoint(path, saved).ok());

  absl::StatusOr<Checkpoint> loaded = load_checkpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->optimizer.optimizer, "Lion");
  Tensor w2 = zeros({4, 3}).set_requires_grad(true);
  Lion resumed({{"w", w2}}, {});  // options come from the checkpoint
  {
    NoGradGuard no_grad;
    copy_(w2, loaded->model.at(0).tensor);
  }
  resumed.load_state_dict(loaded->optimizer);
  EXPECT_EQ(resumed.options().betas[0], 0.95);
  EXPECT_EQ(resumed.options().weight_decay, 0.2);
  for (int t = 3; t < 6; ++t) {
    w.set_grad(grads[t]);
    lion.step();
    w2.set_grad(grads[t]);
    resumed.step();
    EXPECT_TRUE(same_bits(w, w2)) << "step " << t;
    EXPECT_TRUE(same_bits(lion.state("w")->at("exp_avg"), resumed.state("w")->at("exp_avg"))) << "step " << t;
  }
  EXPECT_EQ(resumed.state("w")->at("step").item<int64_t>(), 6);
}

}  // namespace
}  // namespace mantissa
