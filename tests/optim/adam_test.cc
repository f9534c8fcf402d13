// Adam and AdamW against PyTorch (tests/golden/optim.h5): the five Adam/AdamW configurations, 25 steps of
// given gradients, parameters compared after every step.
#include "optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "framework/error.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

using testing::GoldenFile;

std::unique_ptr<Optimizer> make_from_golden(const GoldenFile& f, const std::string& cfg,
                                            const std::vector<NamedTensor>& params) {
  auto attr = [&](const char* name, double fallback) {
    return f.has_attr(cfg, name) ? f.attr_f64(cfg, name) : fallback;
  };
  std::array<double, 2> betas{0.9, 0.999};
  if (f.has_attr(cfg, "betas")) {
    const auto b = f.attr_f64_vector(cfg, "betas");
    betas = {b.at(0), b.at(1)};
  }
  const std::string type = f.attr_str(cfg, "optimizer");
  if (type == "Adam")
    return std::make_unique<Adam>(params, AdamOptions{.lr = attr("lr", 1e-3),
                                                      .betas = betas,
                                                      .eps = attr("eps", 1e-8),
                                                      .weight_decay = attr("weight_decay", 0.0),
                                                      .amsgrad = attr("amsgrad", 0.0) != 0.0});
  return std::make_unique<AdamW>(params, AdamWOptions{.lr = attr("lr", 1e-3),
                                                      .betas = betas,
                                                      .eps = attr("eps", 1e-8),
                                                      .weight_decay = attr("weight_decay", 1e-2),
                                                      .amsgrad = attr("amsgrad", 0.0) != 0.0});
}

class AdamGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(AdamGolden, MatchesPyTorchEveryStep) {
  GoldenFile f("optim.h5");
  const std::string cfg = std::string("/configs/") + GetParam();
  std::vector<NamedTensor> params;
  for (const char* name : {"p0", "p1"})
    params.push_back({name, f.tensor(std::string("/init/") + name, DType::kF32).set_requires_grad(true)});
  auto opt = make_from_golden(f, cfg, params);
  int64_t exact = 0, total = 0;
  for (int t = 0; t < 25; ++t) {
    for (auto& [name, p] : params) p.set_grad(f.tensor("/grads/" + std::to_string(t) + "/" + name, DType::kF32));
    opt->step();
    for (auto& [name, p] : params) {
      const auto want = f.f32(cfg + "/after/" + std::to_string(t) + "/" + name);
      const float* got = p.data<float>();
      for (size_t i = 0; i < want.size(); ++i) {
        // The bound: float32 on both sides, 1e-6 relative (plus a tiny absolute floor for values
        // near zero). The update repeats PyTorch's ops in order, so every value is in fact bit-exact.
        EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i]) + 1e-9) << GetParam() << " step " << t << " " << name;
        exact += got[i] == want[i];
        ++total;
      }
    }
    EXPECT_EQ(opt->state("p0")->at("step").item<int64_t>(), t + 1);
  }
  RecordProperty("bit_exact_fraction", std::to_string(double(exact) / double(total)));
  EXPECT_EQ(exact, total) << GetParam() << ": expected bit-exact with PyTorch's CPU single-tensor path";
}

INSTANTIATE_TEST_SUITE_P(Configs, AdamGolden,
                         ::testing::Values("adam", "adam_wd_betas_eps", "adam_amsgrad", "adamw", "adamw_amsgrad"));

TEST(Adam, StateNamesAndDefaults) {
  Tensor w = full({3}, 1.0).set_requires_grad(true);
  Adam adam({{"w", w}}, {.lr = 0.1, .amsgrad = true});
  EXPECT_EQ(adam.state("w"), nullptr);  // no state before the first step
  w.set_grad(full({3}, 0.5));
  adam.step();
  const ParamState* s = adam.state("w");
  ASSERT_NE(s, nullptr);
  for (const char* key : {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) EXPECT_TRUE(s->count(key)) << key;
  // First step: m = 0.1 g, v = 0.001 g^2, bias-corrected to g and g^2, so p moves by lr * g / (|g| + eps).
  EXPECT_NEAR(w.data<float>()[0], 1.0f - 0.1f, 1e-6);
  EXPECT_EQ(AdamWOptions{}.weight_decay, 1e-2);  // PyTorch's AdamW default
  EXPECT_EQ(AdamOptions{}.weight_decay, 0.0);
}

TEST(Adam, RefusesSixteenBitParametersAndBadOptions) {
  Tensor h = full({2}, 1.0, {.dtype = DType::kF16}).set_requires_grad(true);
  try {
    Adam({{"h", h}}, {});
    FAIL() << "f16 parameter accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'h' is f16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp32"), std::string::npos) << e.what();
  }
  Tensor w = full({2}, 1.0).set_requires_grad(true);
  EXPECT_THROW(Adam({{"w", w}}, {.betas = {0.9, 1.0}}), Error);
  EXPECT_THROW(AdamW({{"w", w}}, {.lr = -1.0}), Error);
  EXPECT_THROW(Adam({{"w", w}}, {.eps = -1e-8}), Error);
}

TEST(Adam, DoubleParametersStepInDouble) {
  Tensor w = full({2}, 1.0, {.dtype = DType::kF64}).set_requires_grad(true);
  Adam adam({{"w", w}}, {.lr = 0.1});
  w.set_grad(full({2}, 2.0, {.dtype = DType::kF64}));
  adam.step();
  // One step moves by lr * g / (|g| + eps) exactly up to double rounding.
  EXPECT_NEAR(w.data<double>()[0], 1.0 - 0.1 * 2.0 / (2.0 + 1e-8), 1e-15);
}

}  // namespace
}  // namespace mantissa
