// LR schedules against closed forms (PyTorch's, written as PyTorch writes them, where it has the same
// schedule), composition, and exact save/restore of a scheduler.
#include "optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "framework/error.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

TEST(Schedule, ConstantAndStepDecay) {
  EXPECT_EQ(constant()(123), 1.0);
  EXPECT_EQ(constant(0.25)(0), 0.25);
  const Schedule s = step_decay({.step_size = 3, .gamma = 0.5});
  for (int64_t t = 0; t < 20; ++t) EXPECT_EQ(s(t), std::pow(0.5, double(t / 3))) << t;  // StepLR closed form
  EXPECT_EQ(s(5), 0.5);
  EXPECT_EQ(s(6), 0.25);
}

TEST(Schedule, LinearMatchesLinearLR) {
  const double start = 0.25, end = 1.0;
  const int64_t total = 7;
  const Schedule s = linear({.start_factor = start, .end_factor = end, .total_steps = total});
  for (int64_t t = 0; t < 12; ++t) {
    // PyTorch: base_lr * (start_factor + (end_factor - start_factor) * min(total_iters, last_epoch) / total_iters)
    const double torch = 0.1 * (start + (end - start) * double(std::min(total, t)) / double(total));
    EXPECT_EQ(0.1 * s(t), torch) << t;
  }
  const Schedule decay = linear({.start_factor = 1.0, .end_factor = 0.0, .total_steps = 4});
  EXPECT_EQ(decay(0), 1.0);
  EXPECT_EQ(decay(2), 0.5);
  EXPECT_EQ(decay(4), 0.0);
  EXPECT_EQ(decay(9), 0.0);
}

TEST(Schedule, CosineMatchesCosineAnnealingLR) {
  const int64_t total = 10;
  const Schedule s = cosine({.total_steps = total});
  for (int64_t t = 0; t <= total; ++t) {
    // PyTorch: eta_min + (base_lr - eta_min) * (1 + cos(pi * last_epoch / T_max)) / 2, with eta_min = 0:
    // the halving is exact, so the two orders agree bit for bit.
    const double torch = 0.0 + (0.3 - 0.0) * (1 + std::cos(std::numbers::pi * double(t) / double(total))) / 2;
    EXPECT_EQ(0.3 * s(t), torch) << t;
  }
  EXPECT_EQ(s(total + 5), 0.0);  // holds the minimum past the end
  const Schedule floor = cosine({.total_steps = total, .min_factor = 0.1});
  for (int64_t t = 0; t <= total; ++t) {
    const double eta_min = 0.1 * 0.3;
    const double torch = eta_min + (0.3 - eta_min) * (1 + std::cos(std::numbers::pi * double(t) / double(total))) / 2;
    // eta_min is a fraction of the base lr here, so the products round differently: a few ulps.
    EXPECT_NEAR(0.3 * floor(t), torch, 4e-16 * torch) << t;
  }
  EXPECT_NEAR(floor(total), 0.1, 1e-16);
}

TEST(Schedule, WarmupThenCosine) {
  const Schedule s = warmup_cosine({.warmup_steps = 4, .total_steps = 14, .min_factor = 0.0});
  EXPECT_EQ(s(0), 0.0);
  EXPECT_EQ(s(1), 0.25);
  EXPECT_EQ(s(2), 0.5);
  EXPECT_EQ(s(4), 1.0);           // cos(0): the peak at the end of the warmup
  EXPECT_NEAR(s(9), 0.5, 1e-15);  // halfway through the 10 cosine steps
  EXPECT_EQ(s(14), 0.0);
  // The same thing written with sequential: identical values.
  const Schedule same =
      sequential({linear({.start_factor = 0, .end_factor = 1, .total_steps = 4}), cosine({.total_steps = 10})}, {4});
  for (int64_t t = 0; t < 20; ++t) EXPECT_EQ(s(t), same(t)) << t;
}

TEST(Schedule, ChainedMultiplies) {
  const Schedule s = chained(
      {linear({.start_factor = 0.5, .end_factor = 1.0, .total_steps = 2}), step_decay({.step_size = 2, .gamma = 0.1})});
  EXPECT_EQ(s(0), 0.5 * 1.0);
  EXPECT_EQ(s(1), 0.75 * 1.0);
  EXPECT_EQ(s(2), 1.0 * 0.1);
}

TEST(Schedule, RefusesBadOptions) {
  EXPECT_THROW(step_decay({.step_size = 0}), Error);
  EXPECT_THROW(cosine({.total_steps = 0}), Error);
  EXPECT_THROW(sequential({constant(), constant()}, {}), Error);
  EXPECT_THROW(warmup_cosine({.warmup_steps = 5, .total_steps = 5}), Error);
}

TEST(LRScheduler, SetsEveryGroupAndRestoresExactly) {
  Tensor a = full({2}, 1.0).set_requires_grad(true), b = full({2}, 1.0).set_requires_grad(true);
  SGD sgd({{"a", a}}, {.lr = 0.1});
  sgd.add_param_group({{"b", b}}, {.lr = 0.01});
  const Schedule s = warmup_cosine({.warmup_steps = 3, .total_steps = 20, .warmup_start_factor = 0.1});
  LRScheduler sched(sgd, s);
  EXPECT_EQ(sgd.lr(0), 0.1 * 0.1);  // step 0 set on construction
  for (int t = 0; t < 7; ++t) sched.step();
  EXPECT_EQ(sgd.lr(0), 0.1 * s(7));
  EXPECT_EQ(sgd.lr(1), 0.01 * s(7));
  const LRSchedulerState saved = sched.state_dict();

  Tensor c = full({2}, 1.0).set_requires_grad(true), d = full({2}, 1.0).set_requires_grad(true);
  SGD other({{"a", c}}, {.lr = 5.0});
  other.add_param_group({{"b", d}}, {.lr = 5.0});
  LRScheduler resumed(other, s);
  resumed.load_state_dict(saved);
  EXPECT_EQ(resumed.last_step(), 7);
  for (int t = 0; t < 30; ++t) {
    ASSERT_EQ(other.lr(0), sgd.lr(0)) << t;
    ASSERT_EQ(other.lr(1), sgd.lr(1)) << t;
    sched.step();
    resumed.step();
  }
  EXPECT_THROW(resumed.load_state_dict({.step = 1, .base_lrs = {0.1}}), Error);  // one lr for two groups
}

}  // namespace
}  // namespace mantissa
