// The GradScaler training loop of amp/README.md, compiled and run here; a second test checks that the
// README shows exactly the code between the markers, so the two cannot drift.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/random.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tests/support/doc_example.h"

namespace mantissa {
namespace {

TEST(GradScalerReadme, ExampleRuns) {
  Tensor w = randn({10, 784}, {.requires_grad = true});
  Tensor x = randn({32, 784});
  Tensor target = zeros({32}, {.dtype = DType::kI64});
  int applied_steps = 0;
  // GRAD-SCALER-EXAMPLE-BEGIN
  SGD opt({{"w", w}}, {.lr = 0.1});
  amp::GradScaler scaler;  // init_scale 2^16, growth 2, backoff 0.5, growth_interval 2000
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast({.dtype = DType::kF16});
      loss = cross_entropy(linear(x, w), target);
    }
    scaler.scale(loss).backward();  // grads of w are fp32, multiplied by the scale
    scaler.unscale_(opt);           // only needed to clip (or look at) the true grads
    clip_grad_norm_(opt.group_params(0), 1.0);
    if (scaler.step(opt)) ++applied_steps;  // false: an inf/nan grad, nothing was changed
    scaler.update();                        // backoff on inf, growth after 2000 clean steps
  }
  // GRAD-SCALER-EXAMPLE-END
  EXPECT_EQ(applied_steps, 3);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.stats().steps, 3);
}

TEST(GradScalerReadme, ReadmeShowsTheExampleVerbatim) {
  EXPECT_TRUE(testing::readme_shows_example("amp/README.md", "tests/amp/grad_scaler_readme_test.cc",
                                            "GRAD-SCALER-EXAMPLE-BEGIN", "GRAD-SCALER-EXAMPLE-END"));
}

}  // namespace
}  // namespace mantissa
