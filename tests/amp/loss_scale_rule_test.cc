// amp/loss_scale_rule.h (the update the CUDA GradScaler runs on the device) against amp::GradScaler's CPU
// update(): the same scale, trackers and statistics after every iteration of overflow, growth, hysteresis,
// floor and ceiling sequences.
#include "amp/loss_scale_rule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

namespace um = update_math;

um::LossScaleRule rule_of(const amp::GradScalerOptions& o) {
  return {.growth_factor = o.growth_factor,
          .backoff_factor = o.backoff_factor,
          .growth_interval = o.growth_interval,
          .hysteresis = o.hysteresis,
          .min_scale = o.min_scale,
          .max_scale = o.max_scale,
          .throw_at_min_scale = o.on_min_scale == amp::OnMinScale::kThrow};
}

// Runs `overflows` (true: an inf grad that iteration) through a CPU GradScaler and through the rule, and
// compares everything after each update().
void check_sequence(const amp::GradScalerOptions& o, const std::vector<bool>& overflows, const std::string& name) {
  amp::GradScaler scaler(o);
  Tensor w = zeros({3}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 0.1});

  float scale = static_cast<float>(o.init_scale), inv_scale = 0.0f;
  int64_t counters[um::kNumLossScaleCounters] = {0, 0, 0, 0, -1, -1};
  for (size_t i = 0; i < overflows.size(); ++i) {
    const std::string at = name + ", iteration " + std::to_string(i);
    w.set_grad(full({3}, overflows[i] ? std::numeric_limits<float>::infinity() : 1.0f));
    scaler.step(opt);
    scaler.update();
    um::apply_loss_scale_rule(scale, inv_scale, counters, overflows[i], rule_of(o));

    const amp::GradScalerStats stats = scaler.stats();
    ASSERT_EQ(scaler.get_scale(), static_cast<double>(scale)) << at;
    EXPECT_EQ(inv_scale, static_cast<float>(1.0 / scaler.get_scale())) << at;
    EXPECT_EQ(scaler.growth_tracker(), counters[um::kGrowthTracker]) << at;
    EXPECT_EQ(scaler.state_dict().at("_consecutive_overflows"), double(counters[um::kConsecutiveOverflows])) << at;
    EXPECT_EQ(stats.consecutive_skips, counters[um::kConsecutiveOverflows]) << at;
    EXPECT_EQ(stats.steps, counters[um::kSteps]) << at;
    EXPECT_EQ(stats.skipped_steps, counters[um::kSkippedSteps]) << at;
    EXPECT_EQ(stats.last_overflow_step, counters[um::kLastOverflowStep]) << at;
    EXPECT_EQ(counters[um::kFloorOverflowStep], -1) << at;
  }
}

TEST(LossScaleRule, PyTorchUpdateRule) {
  // PyTorch's own _amp_update_scale_ case: growth 2, backoff 0.25, interval 2, scale 4.
  check_sequence({.init_scale = 4.0, .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2},
                 {false, false, true, false, false, false, true, true}, "pytorch");
}

TEST(LossScaleRule, RandomSequencesWithExtensions) {
  std::mt19937 rng(5);
  int index = 0;
  for (int64_t hysteresis : {1, 2, 3}) {
    for (int64_t interval : {1, 2, 5}) {
      for (double min_scale : {0.0, 1.0}) {
        for (double max_scale : {std::numeric_limits<double>::infinity(), 1024.0}) {
          amp::GradScalerOptions o{.init_scale = 64.0,
                                   .growth_factor = 2.0,
                                   .backoff_factor = 0.5,
                                   .growth_interval = interval,
                                   .hysteresis = hysteresis,
                                   .min_scale = min_scale,
                                   .max_scale = max_scale};
          // Overflows in runs (so hysteresis and the floor are reached) and long clean stretches (so the
          // scale grows to the ceiling).
          std::vector<bool> overflows;
          for (int i = 0; i < 60; ++i) overflows.push_back(rng() % 100 < (i < 30 ? 45u : 10u));
          check_sequence(o, overflows, "case " + std::to_string(index++));
        }
      }
    }
  }
}

TEST(LossScaleRule, GrowthStopsBeforeInfinity) {
  // 2^127 * 2 is inf in f32: the scale stays, the tracker resets (PyTorch's rule).
  check_sequence({.init_scale = std::ldexp(1.0, 127), .growth_factor = 2.0, .growth_interval = 1},
                 {false, false, true, false}, "near f32 max");
}

TEST(LossScaleRule, NonPowerOfTwoFactors) {
  // Factors whose products round in f32: the rule must round as the CPU scaler stores them.
  check_sequence({.init_scale = 1000.0, .growth_factor = 1.1, .backoff_factor = 0.3, .growth_interval = 1},
                 {false, false, true, false, true, true, false, false, false}, "1.1 / 0.3");
}

TEST(LossScaleRule, ThrowAtMinScaleIsRecordedNotApplied) {
  // The CPU scaler throws at the overflow that finds the scale at its floor; the rule records the
  // iteration and leaves the scale (the CUDA scaler throws when it reads this on the host).
  float scale = 1.0f, inv_scale = 0.0f;
  int64_t counters[um::kNumLossScaleCounters] = {0, 0, 0, 0, -1, -1};
  const um::LossScaleRule r{.growth_factor = 2.0,
                            .backoff_factor = 0.5,
                            .growth_interval = 10,
                            .hysteresis = 1,
                            .min_scale = 1.0,
                            .max_scale = std::numeric_limits<double>::infinity(),
                            .throw_at_min_scale = true};
  um::apply_loss_scale_rule(scale, inv_scale, counters, false, r);
  um::apply_loss_scale_rule(scale, inv_scale, counters, true, r);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(counters[um::kFloorOverflowStep], 1);
  um::apply_loss_scale_rule(scale, inv_scale, counters, true, r);
  EXPECT_EQ(counters[um::kFloorOverflowStep], 1) << "the first such iteration is kept";

  amp::GradScaler scaler(
      {.init_scale = 1.0, .growth_interval = 10, .min_scale = 1.0, .on_min_scale = amp::OnMinScale::kThrow});
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 0.1});
  w.set_grad(full({1}, std::numeric_limits<float>::infinity()));
  scaler.step(opt);
  EXPECT_THROW(scaler.update(), Error);
  EXPECT_EQ(scaler.get_scale(), 1.0);
}

}  // namespace
}  // namespace mantissa
