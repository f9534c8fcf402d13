// OverflowLocator: the skipped step's culprit is named (op, module, value, dtype, magnitude before), and a
// clean backward reports nothing.
#include <gtest/gtest.h>

#include <memory>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/overflow_locator.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/reduce/reduce.h"
#include "optim/sgd.h"

namespace mantissa::amp {
namespace {

// x = ones[2, 4]; layer 0: weights 1, bias 0 (h = 4); relu; layer 2: weights w2, bias 0. Under f16
// autocast with scale 1024 the gradient reaching layer 2's input is 1024 * 4 * w2 per element.
std::shared_ptr<Sequential> make_model(double w2) {
  auto model = std::make_shared<Sequential>(std::make_shared<Linear>(4, 8), std::make_shared<ReLU>(),
                                            std::make_shared<Linear>(8, 4));
  fill_(model->at<Linear>(0)->weight, 1.0);
  fill_(model->at<Linear>(0)->bias, 0.0);
  fill_(model->at<Linear>(2)->weight, w2);
  fill_(model->at<Linear>(2)->bias, 0.0);
  return model;
}

std::optional<OverflowFinding> run_step(double w2, bool* applied) {
  auto model = make_model(w2);
  SGD opt(model->named_parameters(), {.lr = 0.0});
  GradScaler scaler({.init_scale = 1024.0});
  OverflowLocator locator(*model);
  Tensor loss;
  {
    AutocastGuard guard({.dtype = DType::kF16});
    loss = sum(model->forward(ones({2, 4})));
  }
  Tensor scaled = scaler.scale(loss);
  locator.watch(scaled, 812);
  scaled.backward();
  *applied = scaler.step(opt);
  scaler.update();
  return locator.finding();
}

TEST(GradScalerLocator, NamesTheBackwardThatOverflowed) {
  bool applied = true;
  // 1024 * 4 * 100 = 409600 > 65504: the input gradient of layer 2's linear is inf in f16.
  const auto f = run_step(100.0, &applied);
  EXPECT_FALSE(applied);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 812);
  EXPECT_EQ(f->op, "Gemm");  // linear's node (ops/matmul/matmul.cc)
  EXPECT_EQ(f->module, "2");
  EXPECT_EQ(f->value, "inf");
  EXPECT_EQ(f->dtype, DType::kF16);
  EXPECT_EQ(f->max_abs_before, 1024.0);  // the scale, the gradient of sum's input
  EXPECT_EQ(f->message, "step 812: backward of Gemm in 2 produced inf (f16; max |x| before: 1.0e+03)");
}

TEST(GradScalerLocator, CleanBackwardReportsNothing) {
  bool applied = false;
  // 1024 * 4 * 1 = 4096: finite everywhere.
  EXPECT_FALSE(run_step(1.0, &applied).has_value());
  EXPECT_TRUE(applied);
}

// The forward watched: layer 0 with weights 10000 makes h = 4e4 per element (finite in f16), and layer 2
// with weights 10 sums 8 of them times 10: 3.2e6 > 65504, so layer 2's f16 output is inf in the forward.
TEST(GradScalerLocator, NamesTheForwardOpThatOverflowed) {
  auto model = make_model(10.0);
  fill_(model->at<Linear>(0)->weight, 10000.0);
  OverflowLocator locator(*model);
  Tensor loss;
  locator.begin_forward(7);
  {
    AutocastGuard guard({.dtype = DType::kF16});
    loss = sum(model->forward(ones({2, 4})));
  }
  ASSERT_TRUE(locator.finding().has_value());
  const OverflowFinding f = *locator.finding();
  EXPECT_EQ(f.step, 7);
  EXPECT_EQ(f.op, "Gemm");
  EXPECT_EQ(f.module, "2");
  EXPECT_EQ(f.value, "inf");
  EXPECT_EQ(f.dtype, DType::kF16);
  EXPECT_NE(f.message.find("step 7: forward of Gemm in 2 produced inf (f16"), std::string::npos) << f.message;
  // watch() ends the forward check and keeps this step's forward finding ahead of the backward's.
  locator.watch(loss, 7);
  EXPECT_FALSE(has_forward_observer());
  loss.backward();
  EXPECT_NE(locator.finding()->message.find("forward of Gemm"), std::string::npos);
}

TEST(GradScalerLocator, CleanForwardAndBackwardReportNothing) {
  auto model = make_model(0.5);
  {
    OverflowLocator locator(*model);
    locator.begin_forward(1);
    Tensor loss = sum(model->forward(ones({2, 4})));
    locator.watch(loss, 1);
    loss.backward();
    EXPECT_FALSE(locator.finding().has_value());
    locator.begin_forward(2);
  }
  EXPECT_FALSE(has_forward_observer()) << "the locator's destructor removes its forward check";
}

}  // namespace
}  // namespace mantissa::amp
