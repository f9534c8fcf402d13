// The FP8 training loop of amp/README.md, compiled and run here; a second test checks that the README shows
// exactly the code between the markers, so the two cannot drift.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "amp/autocast.h"
#include "amp/fp8.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "tests/support/doc_example.h"

namespace mantissa {
namespace {

TEST(Fp8Readme, ExampleRuns) {
  Tensor x = randn({32, 784});
  Tensor target = zeros({32}, {.dtype = DType::kI64});
  // FP8-EXAMPLE-BEGIN
  // The hidden Linear (784 -> 256: both multiples of 16) runs in FP8; the 10-way head stays on bf16.
  Sequential model(std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10));
  amp::Fp8Context fp8(model, amp::Fp8Recipe::delayed());  // manages "0.weight"
  Adam opt(model.named_parameters(), {.lr = 1e-3});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast({.dtype = DType::kBF16});  // every other op in bf16
      amp::Fp8Guard fp8_guard(fp8);                          // 0.weight's linear in FP8
      loss = cross_entropy(model.forward(x), target);
    }
    loss.backward();
    opt.step();
    fp8.step();  // new delayed scales from the amax histories: device ops, no host read
  }
  // FP8-EXAMPLE-END
  EXPECT_THAT(fp8.managed(), ::testing::ElementsAre("0.weight"));
  EXPECT_EQ(fp8.steps(), 3);
  for (const amp::Fp8Context::TensorStats& s : fp8.stats()) EXPECT_NE(s.scale, 1.0) << s.role;
}

TEST(Fp8Readme, ReadmeShowsTheExampleVerbatim) {
  EXPECT_TRUE(testing::readme_shows_example("amp/README.md", "tests/amp/fp8_readme_test.cc", "FP8-EXAMPLE-BEGIN",
                                            "FP8-EXAMPLE-END"));
}

}  // namespace
}  // namespace mantissa
