// SGD against PyTorch (tests/golden/optim.h5): the four SGD configurations, 25 steps of given gradients.
#include "optim/sgd.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "framework/error.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

using testing::GoldenFile;

class SgdGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(SgdGolden, MatchesPyTorchEveryStep) {
  GoldenFile f("optim.h5");
  const std::string cfg = std::string("/configs/") + GetParam();
  auto attr = [&](const char* name, double fallback) {
    return f.has_attr(cfg, name) ? f.attr_f64(cfg, name) : fallback;
  };
  const SGDOptions options{.lr = attr("lr", 0.0),
                           .momentum = attr("momentum", 0.0),
                           .dampening = attr("dampening", 0.0),
                           .weight_decay = attr("weight_decay", 0.0),
                           .nesterov = attr("nesterov", 0.0) != 0.0};
  std::vector<NamedTensor> params;
  for (const char* name : {"p0", "p1"})
    params.push_back({name, f.tensor(std::string("/init/") + name, DType::kF32).set_requires_grad(true)});
  SGD sgd(params, options);
  int64_t exact = 0, total = 0;
  for (int t = 0; t < 25; ++t) {
    for (auto& [name, p] : params) p.set_grad(f.tensor("/grads/" + std::to_string(t) + "/" + name, DType::kF32));
    sgd.step();
    for (auto& [name, p] : params) {
      const auto want = f.f32(cfg + "/after/" + std::to_string(t) + "/" + name);
      const float* got = p.data<float>();
      for (size_t i = 0; i < want.size(); ++i) {
        // float32 throughout on both sides; 1e-6 relative leaves room for a rounding or two per step
        // (the update itself is done in the same order and with the same fused multiply-adds).
        EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i]) + 1e-7) << GetParam() << " step " << t << " " << name;
        exact += got[i] == want[i];
        ++total;
      }
    }
  }
  RecordProperty("bit_exact_fraction", std::to_string(double(exact) / double(total)));
  EXPECT_EQ(exact, total) << "SGD is expected to be bit-exact with PyTorch's CPU single-tensor path";
}

INSTANTIATE_TEST_SUITE_P(Configs, SgdGolden,
                         ::testing::Values("sgd_plain", "sgd_momentum", "sgd_momentum_dampening_wd",
                                           "sgd_nesterov_wd"));

TEST(Sgd, SkipsParamsWithoutGradAndChecksOptions) {
  Tensor a = full({2}, 1.0).set_requires_grad(true), b = full({2}, 1.0).set_requires_grad(true);
  SGD sgd({{"a", a}, {"b", b}}, {.lr = 0.5, .momentum = 0.9});
  a.set_grad(full({2}, 2.0));
  sgd.step();
  EXPECT_EQ(a.data<float>()[0], 0.0f);  // 1 - 0.5 * 2
  EXPECT_EQ(b.data<float>()[0], 1.0f);  // no grad: untouched, no buffer
  EXPECT_FALSE(sgd.momentum_buffer("b").defined());
  EXPECT_EQ(sgd.momentum_buffer("a").data<float>()[1], 2.0f);  // first step: buf = g
  sgd.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_THROW(SGD({{"a", a}}, {.lr = 0.1, .dampening = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(SGD({{"a", a}, {"a", b}}, {.lr = 0.1}), Error);
  EXPECT_THROW(SGD({{"x", full({2}, 1.0)}}, {.lr = 0.1}), Error);  // does not require grad
}

}  // namespace
}  // namespace mantissa
