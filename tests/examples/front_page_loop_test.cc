// The mixed-precision loop of the front page (README.md), compiled and run here on a synthetic task an MLP
// can learn; a second test checks that the README shows exactly the lines between the markers.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "data/loader.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tests/support/doc_example.h"

namespace mantissa {
namespace {

// The fraction of `inputs` whose predicted class (argmax of the model's logits) is `labels`'.
double accuracy(MLP& model, const Tensor& inputs, const Tensor& labels) {
  NoGradGuard no_grad;
  const Tensor predicted = argmax(model.forward(inputs), 1);
  int64_t right = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) right += predicted.data<int64_t>()[i] == labels.data<int64_t>()[i];
  return static_cast<double>(right) / static_cast<double>(labels.numel());
}

TEST(FrontPageLoop, TrainsInFp16WithTheScaler) {
  // 4096 examples of 784 features; the class is the argmax of a fixed random linear map, a task an MLP learns.
  Generator generator(7);
  const Tensor all_inputs = randn({4096, 784}, {}, &generator);
  const Tensor all_labels = argmax(matmul(all_inputs, randn({784, 10}, {}, &generator)), 1);
  DataLoader loader(std::make_shared<TensorDataset>(std::vector{all_inputs, all_labels}),
                    {.batch_size = 64, .shuffle = Shuffle::kRandom, .seed = 1});
  // FRONT-PAGE-LOOP-BEGIN
  MLP model(784, {256}, 10);  // fp32 master weights
  SGD opt(model.named_parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::GradScaler scaler;  // dynamic loss scaling for fp16, starting at 2^16

  while (std::optional<Example> batch = loader.next()) {  // one epoch of (inputs, labels) batches
    const Tensor& inputs = (*batch)[0];
    const Tensor& labels = (*batch)[1];
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast({.dtype = DType::kF16});  // the linears in fp16, the loss in fp32
      loss = cross_entropy(model.forward(inputs), labels);
    }
    scaler.scale(loss).backward();             // fp32 gradients of loss * scale
    scaler.unscale_(opt);                      // divide them by the scale; note any inf or nan
    clip_grad_norm_(model.parameters(), 1.0);  // clip the true gradients
    scaler.step(opt);                          // skipped when a gradient was inf or nan
    scaler.update();                           // halve the scale after an inf; double it after 2000 clean steps
  }
  // FRONT-PAGE-LOOP-END

  // One update per batch, none skipped (the scale stays at 2^16: these gradients are far from fp16's limit).
  EXPECT_EQ(scaler.stats().steps, 4096 / 64);
  EXPECT_EQ(scaler.stats().skipped_steps, 0);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  // A random model is right on about 10% of the examples. One epoch took it to 0.85-0.88 over five seeds of
  // the data and the initial weights; 0.7 leaves room for the seed, and a loop that does not learn fails.
  EXPECT_GT(accuracy(model, all_inputs, all_labels), 0.7);
}

TEST(FrontPageLoop, ReadmeShowsTheLoopVerbatim) {
  EXPECT_TRUE(testing::readme_shows_example("README.md", "tests/examples/front_page_loop_test.cc",
                                            "FRONT-PAGE-LOOP-BEGIN", "FRONT-PAGE-LOOP-END"));
}

}  // namespace
}  // namespace mantissa
