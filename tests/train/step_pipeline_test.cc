// StepPipeline (train/step_pipeline.h) on one CPU rank: when steps are due at a read lag, the read values
// (the mean of the micro-batches' losses, grad norm, scale, skips counted on from begin()), the stop taken
// as a step is read, examples per second, and a pipeline refused without what it needs.
#include "train/step_pipeline.h"

#include <gtest/gtest.h>

#include <csignal>
#include <utility>

#include "framework/error.h"

namespace mantissa {
namespace {

Tensor f64_scalar(double v) { return full({}, v, {.dtype = DType::kF64}); }

// A step of one rank with a loss scaler: micro-batch losses `losses` of 4 examples each, then the grad norm,
// the scale and found_inf.
void push_step(StepPipeline& pipeline, int64_t number, std::initializer_list<float> losses, double grad_norm,
               double scale, bool found_inf) {
  StepPipeline::Step step = pipeline.start({.world_size = 1, .scaler = true}, kCPU);
  step.metrics.step = number;
  for (float loss : losses) step.add_micro_batch(full({}, loss), 4);
  pipeline.share_loss(step);
  step.values().grad_norm(f64_scalar(grad_norm));
  step.values().scaler(f64_scalar(scale), full({}, found_inf ? 1.0 : 0.0));
  pipeline.push(std::move(step));
}

TEST(StepPipeline, StepsAreDueOnceMoreThanTheLagAreInFlight) {
  StopRequest stop;
  StepPipeline pipeline({.read_lag = 2, .stop = &stop});
  pipeline.begin(0);
  EXPECT_FALSE(pipeline.due(StepPipeline::Due::kLagged));
  EXPECT_FALSE(pipeline.due(StepPipeline::Due::kAll));
  push_step(pipeline, 1, {1.0f}, 1.0, 2.0, false);
  push_step(pipeline, 2, {1.0f}, 1.0, 2.0, false);
  EXPECT_FALSE(pipeline.due(StepPipeline::Due::kLagged));
  EXPECT_TRUE(pipeline.due(StepPipeline::Due::kAll));
  push_step(pipeline, 3, {1.0f}, 1.0, 2.0, false);
  ASSERT_TRUE(pipeline.due(StepPipeline::Due::kLagged));
  EXPECT_EQ(pipeline.read().metrics.step, 1);  // oldest first
  EXPECT_FALSE(pipeline.due(StepPipeline::Due::kLagged));
  EXPECT_EQ(pipeline.read().metrics.step, 2);
  EXPECT_EQ(pipeline.read().metrics.step, 3);
  EXPECT_FALSE(pipeline.due(StepPipeline::Due::kAll));
}

TEST(StepPipeline, ReadGivesTheStepsValuesAndCountsSkipsOnFromBegin) {
  StopRequest stop;
  StepPipeline pipeline({.read_lag = 0, .stop = &stop});
  pipeline.begin(5);  // a resumed run whose scaler skipped 5 steps before
  push_step(pipeline, 1, {1.0f, 2.0f, 4.5f}, 3.25, 65536.0, true);
  push_step(pipeline, 2, {0.5f}, 0.75, 32768.0, false);

  const StepPipeline::ReadStep first = pipeline.read();
  EXPECT_EQ(first.metrics.step, 1);
  EXPECT_EQ(first.metrics.loss, (1.0 + 2.0 + 4.5) / 3);  // the mean over the micro-batches
  EXPECT_EQ(first.metrics.grad_norm, 3.25);
  EXPECT_EQ(first.metrics.scale, 65536.0);
  EXPECT_TRUE(first.metrics.skipped);
  EXPECT_EQ(first.metrics.skipped_steps, 6);
  EXPECT_GT(first.metrics.samples_per_s, 0.0);  // 12 examples over the step's time
  EXPECT_FALSE(first.histograms.has_value());

  const StepPipeline::ReadStep second = pipeline.read();
  EXPECT_EQ(second.metrics.loss, 0.5);  // one micro-batch: its loss as it is
  EXPECT_EQ(second.metrics.scale, 32768.0);
  EXPECT_FALSE(second.metrics.skipped);
  EXPECT_EQ(second.metrics.skipped_steps, 6);
  EXPECT_GT(pipeline.median_samples_per_s(0), 0.0);
}

TEST(StepPipeline, OneRankTakesTheStopAsAStepIsReadAndKeepsTheFirst) {
  StopRequest stop;
  StepPipeline pipeline({.read_lag = 1, .stop = &stop});
  pipeline.begin(0);
  push_step(pipeline, 1, {1.0f}, 1.0, 1.0, false);
  push_step(pipeline, 2, {1.0f}, 1.0, 1.0, false);
  pipeline.read();
  EXPECT_FALSE(pipeline.agreed_stop().has_value());
  stop.request(SIGTERM);  // e.g. from step 1's callback
  pipeline.read();
  ASSERT_TRUE(pipeline.agreed_stop().has_value());
  EXPECT_EQ(*pipeline.agreed_stop(), SIGTERM);
  stop.clear();
  stop.request(SIGINT);  // a later request changes nothing
  push_step(pipeline, 3, {1.0f}, 1.0, 1.0, false);
  pipeline.read();
  EXPECT_EQ(*pipeline.agreed_stop(), SIGTERM);
  // The next fit() starts with no stop.
  pipeline.begin(0);
  EXPECT_FALSE(pipeline.agreed_stop().has_value());
  EXPECT_FALSE(pipeline.due(StepPipeline::Due::kAll));
}

TEST(StepPipeline, RefusesOptionsItCannotRunWith) {
  StopRequest stop;
  EXPECT_THROW(StepPipeline({.read_lag = 0, .stop = nullptr}), Error);
  EXPECT_THROW(StepPipeline({.read_lag = -1, .stop = &stop}), Error);
  EXPECT_THROW(StepPipeline({.world_size = 2, .read_lag = 0, .stop = &stop}), Error);  // no group
}

}  // namespace
}  // namespace mantissa
