// amp/loss_scale_rule.h, the update() rule that the CPU GradScaler runs on host values and the CUDA one
// in a kernel, against a reference written here the way Megatron-LM and DeepSpeed state it (a hysteresis
// tracker counting down from `hysteresis`, refilled by the chosen rule): the GradScaler's scale, trackers
// and statistics, and the rule's counters called directly, after every iteration of overflow, growth,
// hysteresis, floor and ceiling sequences under both refill rules.
#include "amp/loss_scale_rule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "optim/sgd.h"

namespace mantissa {
namespace {

namespace loss_scale = amp::loss_scale;

loss_scale::Rule rule_of(const amp::GradScalerOptions& o) {
  return {.growth_factor = o.growth_factor,
          .backoff_factor = o.backoff_factor,
          .growth_interval = o.growth_interval,
          .hysteresis = o.hysteresis,
          .hysteresis_refill = o.hysteresis_refill,
          .min_scale = o.min_scale,
          .max_scale = o.max_scale,
          .throw_at_min_scale = o.on_min_scale == amp::OnMinScale::kThrow};
}

// The rule as the libraries describe it: the tracker starts at `hysteresis`, drops by one per overflow
// (not below 0) and the scale backs off when it reaches 0; growth (PyTorch's: the product in double,
// stored as f32, never to inf) refills it, and under kOnCleanStep so does every clean step.
struct Reference {
  explicit Reference(const amp::GradScalerOptions& o)
      : o(o), scale(static_cast<float>(o.init_scale)), tracker(o.hysteresis) {}
  void update(bool overflow) {
    if (overflow) {
      growth = 0;
      ++in_a_row;
      ++skipped;
      last_overflow = steps;
      tracker = std::max<int64_t>(tracker - 1, 0);
      if (tracker == 0) scale = static_cast<float>(std::max(double(scale) * o.backoff_factor, o.min_scale));
    } else {
      in_a_row = 0;
      if (o.hysteresis_refill == amp::HysteresisRefill::kOnCleanStep) tracker = o.hysteresis;
      if (++growth == o.growth_interval) {
        const float grown = static_cast<float>(std::min(double(scale) * o.growth_factor, o.max_scale));
        if (std::isfinite(grown)) scale = grown;
        growth = 0;
        tracker = o.hysteresis;
      }
    }
    ++steps;
  }
  amp::GradScalerOptions o;
  float scale;
  int64_t tracker, growth = 0, in_a_row = 0, steps = 0, skipped = 0, last_overflow = -1;
};

// Runs `overflows` (true: an inf grad that iteration) through a CPU GradScaler, the rule called directly
// and the reference, and compares everything after each update().
void check_sequence(const amp::GradScalerOptions& o, const std::vector<bool>& overflows, const std::string& name) {
  amp::GradScaler scaler(o);
  Tensor w = zeros({3}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 0.1});
  Reference ref(o);

  float scale = static_cast<float>(o.init_scale), inv_scale = 0.0f;
  int64_t counters[loss_scale::kNumCounters];
  loss_scale::initial_counters(counters);
  for (size_t i = 0; i < overflows.size(); ++i) {
    const std::string at = name + ", iteration " + std::to_string(i);
    w.set_grad(full({3}, overflows[i] ? std::numeric_limits<float>::infinity() : 1.0f));
    scaler.step(opt);
    scaler.update();
    loss_scale::apply_rule(scale, inv_scale, counters, overflows[i], rule_of(o));
    ref.update(overflows[i]);

    ASSERT_EQ(static_cast<double>(ref.scale), static_cast<double>(scale)) << at;
    ASSERT_EQ(scaler.get_scale(), static_cast<double>(ref.scale)) << at;
    EXPECT_EQ(inv_scale, static_cast<float>(1.0 / scaler.get_scale())) << at;
    EXPECT_EQ(counters[loss_scale::kGrowthTracker], ref.growth) << at;
    EXPECT_EQ(o.hysteresis - counters[loss_scale::kHysteresisOverflows], ref.tracker) << at;
    EXPECT_EQ(counters[loss_scale::kConsecutiveOverflows], ref.in_a_row) << at;
    EXPECT_EQ(counters[loss_scale::kSteps], ref.steps) << at;
    EXPECT_EQ(counters[loss_scale::kSkippedSteps], ref.skipped) << at;
    EXPECT_EQ(counters[loss_scale::kLastOverflowStep], ref.last_overflow) << at;
    EXPECT_EQ(counters[loss_scale::kFloorOverflowStep], -1) << at;

    const amp::GradScalerStats stats = scaler.stats();
    EXPECT_EQ(scaler.growth_tracker(), ref.growth) << at;
    EXPECT_EQ(stats.hysteresis_left, ref.tracker) << at;
    EXPECT_EQ(scaler.state_dict().at("_consecutive_overflows"), double(ref.in_a_row)) << at;
    EXPECT_EQ(scaler.state_dict().at("_hysteresis_overflows"), double(o.hysteresis - ref.tracker)) << at;
    EXPECT_EQ(stats.consecutive_skips, ref.in_a_row) << at;
    EXPECT_EQ(stats.steps, ref.steps) << at;
    EXPECT_EQ(stats.skipped_steps, ref.skipped) << at;
    EXPECT_EQ(stats.last_overflow_step, ref.last_overflow) << at;
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
  for (amp::HysteresisRefill refill : {amp::HysteresisRefill::kOnCleanStep, amp::HysteresisRefill::kOnGrowth}) {
    for (int64_t hysteresis : {1, 2, 3}) {
      for (int64_t interval : {1, 2, 5}) {
        for (double min_scale : {0.0, 1.0}) {
          for (double max_scale : {std::numeric_limits<double>::infinity(), 1024.0}) {
            amp::GradScalerOptions o{.init_scale = 64.0,
                                     .growth_factor = 2.0,
                                     .backoff_factor = 0.5,
                                     .growth_interval = interval,
                                     .hysteresis = hysteresis,
                                     .hysteresis_refill = refill,
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
  int64_t counters[loss_scale::kNumCounters];
  loss_scale::initial_counters(counters);
  const loss_scale::Rule r{.growth_factor = 2.0,
                           .backoff_factor = 0.5,
                           .growth_interval = 10,
                           .hysteresis = 1,
                           .hysteresis_refill = amp::HysteresisRefill::kOnCleanStep,
                           .min_scale = 1.0,
                           .max_scale = std::numeric_limits<double>::infinity(),
                           .throw_at_min_scale = true};
  loss_scale::apply_rule(scale, inv_scale, counters, false, r);
  loss_scale::apply_rule(scale, inv_scale, counters, true, r);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(counters[loss_scale::kFloorOverflowStep], 1);
  loss_scale::apply_rule(scale, inv_scale, counters, true, r);
  EXPECT_EQ(counters[loss_scale::kFloorOverflowStep], 1) << "the first such iteration is kept";

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
