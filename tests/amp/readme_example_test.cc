// The AutocastGuard example of amp/README.md, compiled and run here; a second test checks that the README
// shows exactly the code between the markers below, so the two cannot drift.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "tests/support/doc_example.h"

namespace mantissa {
namespace {

TEST(AmpReadme, AutocastExampleRuns) {
  // README-EXAMPLE-BEGIN
  // fp32 master weights; the forward runs under autocast, the backward after it.
  Tensor w = randn({10, 784}, {.requires_grad = true});
  Tensor b = zeros({10}, {.requires_grad = true});
  Tensor x = randn({32, 784});
  Tensor target = zeros({32}, {.dtype = DType::kI64});
  Tensor logits, loss;
  {
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    logits = linear(x, w, b);              // bf16: lower precision; w and b are cast once per region
    loss = cross_entropy(logits, target);  // f32: an fp32 op widens its bf16 input
  }
  loss.backward();  // w.grad() and b.grad() are f32, like w and b
  // README-EXAMPLE-END
  EXPECT_EQ(logits.dtype(), DType::kBF16);
  EXPECT_EQ(loss.dtype(), DType::kF32);
  EXPECT_EQ(w.grad().dtype(), DType::kF32);
  EXPECT_EQ(b.grad().dtype(), DType::kF32);
  EXPECT_EQ(amp::cache_size(), 0u);
}

TEST(AmpReadme, ReadmeShowsTheCompiledExample) {
  EXPECT_TRUE(testing::readme_shows_example("amp/README.md", "tests/amp/readme_example_test.cc", "README-EXAMPLE-BEGIN",
                                            "README-EXAMPLE-END"));
}

}  // namespace
}  // namespace mantissa
