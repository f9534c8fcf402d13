// GradScaler beyond PyTorch's tests: a skipped step leaves Adam's params, moments and step counts
// untouched; how LR schedules see skipped steps; hysteresis and its two refill rules, min/max scale, the
// loud failure at min_scale, statistics and the scale history; bf16 with the scaler on.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "amp/grad_scaler.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"

namespace mantissa::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// One iteration on a single parameter: grads `value` (already "scaled"), step, update; returns applied.
bool iterate(GradScaler& scaler, Optimizer& opt, Tensor w, float value) {
  w.set_grad(full(w.shape(), value));
  const bool applied = scaler.step(opt);
  scaler.update();
  return applied;
}

TEST(GradScalerExtras, SkippedStepLeavesParamsMomentsAndStepCount) {
  for (bool explicit_unscale : {false, true}) {
    Generator gen(5);
    Tensor w = randn({4, 3}, {}, &gen).set_requires_grad(true);
    Adam opt({{"w", w}}, {.lr = 0.01});
    GradScaler scaler({.init_scale = 1024.0});
    w.set_grad(randn({4, 3}, {}, &gen));
    ASSERT_TRUE(scaler.step(opt));
    scaler.update();
    const Tensor w_before = w.clone();
    const OptimizerState s_before = opt.state_dict();
    Tensor g = randn({4, 3}, {}, &gen);
    g.data<float>()[7] = kInf;
    w.set_grad(g);
    if (explicit_unscale) scaler.unscale_(opt);
    EXPECT_FALSE(scaler.step(opt));
    scaler.update();
    EXPECT_TRUE(same_bits(w, w_before));
    const OptimizerState s_after = opt.state_dict();
    ASSERT_EQ(s_after.tensors.size(), s_before.tensors.size());
    for (const auto& [key, t] : s_before.tensors) EXPECT_TRUE(same_bits(s_after.tensors.at(key), t)) << key;
    EXPECT_EQ(s_after.tensors.at("w/step").item(), 1.0);
  }
}

// step() without unscale_ runs the fused Optimizer::step(GradScaling); with it, unscale_grads_ then the
// plain step. Both must give the same bits (scale 3000 is not a power of two, so unscaling rounds).
TEST(GradScalerExtras, FusedAndExplicitUnscalePathsAgreeBitwise) {
  Generator gen(17);
  const Tensor init = randn({5, 7}, {}, &gen);
  Tensor wa = init.clone().set_requires_grad(true), wb = init.clone().set_requires_grad(true);
  Adam a({{"w", wa}}, {.lr = 0.01}), b({{"w", wb}}, {.lr = 0.01});
  GradScaler sa({.init_scale = 3000.0}), sb({.init_scale = 3000.0});
  for (int t = 0; t < 3; ++t) {
    const Tensor g = mul(randn({5, 7}, {}, &gen), 3000.0);
    wa.set_grad(g.clone());
    wb.set_grad(g.clone());
    EXPECT_TRUE(sa.step(a));
    sb.unscale_(b);
    EXPECT_TRUE(sb.step(b));
    sa.update();
    sb.update();
    EXPECT_TRUE(same_bits(wa, wb)) << t;
  }
}

TEST(GradScalerExtras, UpdateWithNewScaleLeavesTheTracker) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  iterate(scaler, opt, w, 1);
  iterate(scaler, opt, w, 1);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.update(100.0);
  EXPECT_EQ(scaler.get_scale(), 100.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  iterate(scaler, opt, w, 1);  // the third clean step in a row grows the new scale
  EXPECT_EQ(scaler.get_scale(), 200.0);
}

// A parameter without a grad (unused this iteration) is skipped by the check and by the update, on both
// paths; the others step.
TEST(GradScalerExtras, ParametersWithoutGradsAreSkipped) {
  for (bool explicit_unscale : {false, true}) {
    Tensor a = ones({3}, {.requires_grad = true}), b = ones({2}, {.requires_grad = true});
    SGD opt({{"a", a}, {"b", b}}, {.lr = 1.0});
    GradScaler scaler({.init_scale = 4.0});
    a.set_grad(full({3}, 4.0));
    if (explicit_unscale) scaler.unscale_(opt);
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    EXPECT_EQ(a.data<float>()[0], 0.0f);  // 1 - 1.0 * (4 / 4)
    EXPECT_EQ(b.data<float>()[0], 1.0f);
    EXPECT_FALSE(b.grad().defined());
  }
}

TEST(GradScalerExtras, DisabledScalerPassesTheLossThrough) {
  GradScaler scaler({.state = ScalerState::kDisabled});
  const Tensor loss = scalar_tensor(2.5);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  scaler.update();  // no inf check needed when disabled
}

// LR schedules count LRScheduler::step() calls, not optimizer updates. Calling it only when
// scaler.step() returns true makes the schedule follow applied updates (a warmup is not shortened by
// skipped steps); calling it every iteration (PyTorch's usual loop) makes it follow iterations.
TEST(GradScalerExtras, LrScheduleAndSkippedSteps) {
  const float grads[] = {1, kInf, 1, kInf, kInf, 1};  // 3 applied of 6
  for (bool count_applied_only : {true, false}) {
    Tensor w = zeros({1}, {.requires_grad = true});
    SGD opt({{"w", w}}, {.lr = 1.0});
    LRScheduler sched(opt, linear({.start_factor = 0.0, .end_factor = 1.0, .total_steps = 10}));
    GradScaler scaler({.init_scale = 1.0, .growth_interval = 1000});
    int applied = 0;
    for (float g : grads) {
      const bool ok = iterate(scaler, opt, w, g);
      applied += ok;
      if (ok || !count_applied_only) sched.step();
    }
    EXPECT_EQ(applied, 3);
    EXPECT_EQ(sched.last_step(), count_applied_only ? 3 : 6);
    EXPECT_DOUBLE_EQ(opt.lr(0), count_applied_only ? 0.3 : 0.6);
  }
}

TEST(GradScalerExtras, HysteresisBacksOffAfterNOverflowsInARow) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 64.0, .growth_interval = 1000, .hysteresis = 3});
  EXPECT_FALSE(iterate(scaler, opt, w, kInf));
  EXPECT_FALSE(iterate(scaler, opt, w, kInf));
  EXPECT_EQ(scaler.get_scale(), 64.0);      // two in a row: skipped, no backoff yet
  EXPECT_TRUE(iterate(scaler, opt, w, 1));  // a clean step resets the count
  EXPECT_FALSE(iterate(scaler, opt, w, kInf));
  EXPECT_FALSE(iterate(scaler, opt, w, kInf));
  EXPECT_EQ(scaler.get_scale(), 64.0);
  EXPECT_FALSE(iterate(scaler, opt, w, kInf));
  EXPECT_EQ(scaler.get_scale(), 32.0);  // the third in a row backs off
  EXPECT_FALSE(iterate(scaler, opt, w, kInf));
  EXPECT_EQ(scaler.get_scale(), 16.0);  // and each further one in the same run
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// One iteration's expected state after update(): the scale and stats().hysteresis_left.
struct After {
  bool overflow;
  double scale;
  int64_t hysteresis_left;
};

void expect_sequence(const GradScalerOptions& o, const std::vector<After>& expected) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler scaler(o);
  EXPECT_EQ(scaler.stats().hysteresis_left, o.hysteresis) << "a new scaler's count is full";
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(iterate(scaler, opt, w, expected[i].overflow ? kInf : 1.0f), !expected[i].overflow) << i;
    EXPECT_EQ(scaler.get_scale(), expected[i].scale) << "iteration " << i;
    EXPECT_EQ(scaler.stats().hysteresis_left, expected[i].hysteresis_left) << "iteration " << i;
  }
}

// The two refill rules on one sequence (computed by hand), hysteresis 2, growth after 3 clean steps:
// overflows alternating with clean steps, then a growth, then two overflows in a row.
constexpr bool kAlternating[] = {true, false, true, false, true, false, false, false, true, true};

TEST(GradScalerExtras, HysteresisRefillOnCleanStepSequence) {
  // Every clean step refills the count: the alternating overflows never back off (half the steps are
  // skipped); only the two in a row at the end do.
  const bool* f = kAlternating;
  expect_sequence({.init_scale = 64.0, .growth_interval = 3, .hysteresis = 2},  // the default rule
                  {{f[0], 64, 1},
                   {f[1], 64, 2},
                   {f[2], 64, 1},
                   {f[3], 64, 2},
                   {f[4], 64, 1},
                   {f[5], 64, 2},
                   {f[6], 64, 2},
                   {f[7], 128, 2},  // three clean steps in a row: growth
                   {f[8], 128, 1},
                   {f[9], 64, 0}});  // the second in a row backs off
  EXPECT_EQ(GradScalerOptions{}.hysteresis_refill, HysteresisRefill::kOnCleanStep);
}

TEST(GradScalerExtras, HysteresisRefillOnGrowthSequence) {
  // Megatron-LM's rule: the clean steps between overflows do not refill, so the second overflow backs
  // off and so does every one after it until a growth refills the count.
  const bool* f = kAlternating;
  expect_sequence(
      {.init_scale = 64.0, .growth_interval = 3, .hysteresis = 2, .hysteresis_refill = HysteresisRefill::kOnGrowth},
      {{f[0], 64, 1},
       {f[1], 64, 1},
       {f[2], 32, 0},  // differs: the second overflow since the refill backs off
       {f[3], 32, 0},
       {f[4], 16, 0},  // the count is used up: every overflow backs off
       {f[5], 16, 0},
       {f[6], 16, 0},
       {f[7], 32, 2},  // growth refills the count
       {f[8], 32, 1},
       {f[9], 16, 0}});
}

TEST(GradScalerExtras, HysteresisRefillOnGrowthAlsoWhenTheScaleIsCapped) {
  // growth_interval clean steps in a row refill the count even when max_scale keeps the scale (as
  // Megatron-LM, which has no cap, refills at every growth interval).
  expect_sequence({.init_scale = 64.0,
                   .growth_interval = 2,
                   .hysteresis = 2,
                   .hysteresis_refill = HysteresisRefill::kOnGrowth,
                   .max_scale = 64.0},
                  {{true, 64, 1}, {false, 64, 1}, {false, 64, 2}, {true, 64, 1}, {true, 32, 0}});
}

TEST(GradScalerExtras, HysteresisRefillSurvivesStateRoundTrip) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler a(
      {.init_scale = 64.0, .growth_interval = 3, .hysteresis = 2, .hysteresis_refill = HysteresisRefill::kOnGrowth});
  iterate(a, opt, w, kInf);
  iterate(a, opt, w, 1);  // kOnGrowth: one overflow still counted
  const GradScalerState state = a.state_dict();
  EXPECT_EQ(state.at("hysteresis_refill"), 1.0);
  EXPECT_EQ(state.at("_hysteresis_overflows"), 1.0);
  EXPECT_EQ(state.at("_consecutive_overflows"), 0.0);
  GradScaler b;  // the default rule, replaced by the state's
  b.load_state_dict(state);
  EXPECT_EQ(b.options().hysteresis_refill, HysteresisRefill::kOnGrowth);
  EXPECT_EQ(b.stats().hysteresis_left, 1);
  iterate(b, opt, w, kInf);
  EXPECT_EQ(b.get_scale(), 32.0) << "the overflow before the save counts";

  GradScalerState bad = state;
  bad["hysteresis_refill"] = 2;
  GradScaler c;
  EXPECT_THROW(c.load_state_dict(bad), Error);
  EXPECT_EQ(c.get_scale(), 65536.0) << "a refused state changes nothing";
}

TEST(GradScalerExtras, StateFromBeforeHysteresisRefillLoads) {
  // A mantissa state saved before the option (no "hysteresis_refill", no "_hysteresis_overflows") ran
  // kOnCleanStep, the default: it loads with that rule and counts its overflows in a row.
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScalerState old_state = {{"scale", 64.0},          {"growth_factor", 2.0},  {"backoff_factor", 0.5},
                               {"growth_interval", 3.0}, {"_growth_tracker", 0},  {"hysteresis", 3.0},
                               {"min_scale", 0.0},       {"max_scale", 1024.0},   {"_consecutive_overflows", 2.0},
                               {"_steps", 5.0},          {"_skipped_steps", 2.0}, {"_last_overflow_step", 4.0}};
  GradScaler a({.hysteresis_refill = HysteresisRefill::kOnGrowth});
  a.load_state_dict(old_state);
  EXPECT_EQ(a.options().hysteresis_refill, HysteresisRefill::kOnCleanStep);
  EXPECT_EQ(a.stats().hysteresis_left, 1);
  iterate(a, opt, w, kInf);
  EXPECT_EQ(a.get_scale(), 32.0) << "the third overflow in a row";
  // A PyTorch state (its five keys) keeps this scaler's hysteresis and rule.
  GradScaler b({.hysteresis = 2, .hysteresis_refill = HysteresisRefill::kOnGrowth});
  b.load_state_dict({{"scale", 8.0},
                     {"growth_factor", 2.0},
                     {"backoff_factor", 0.5},
                     {"growth_interval", 100.0},
                     {"_growth_tracker", 0.0}});
  EXPECT_EQ(b.options().hysteresis_refill, HysteresisRefill::kOnGrowth);
  EXPECT_EQ(b.stats().hysteresis_left, 2);
}

TEST(GradScalerExtras, MinAndMaxScale) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler scaler(
      {.init_scale = 8.0, .growth_factor = 4.0, .growth_interval = 1, .min_scale = 2.0, .max_scale = 64.0});
  for (int i = 0; i < 5; ++i) iterate(scaler, opt, w, kInf);
  EXPECT_EQ(scaler.get_scale(), 2.0);  // 8 -> 4 -> 2, then held at the floor
  for (int i = 0; i < 5; ++i) iterate(scaler, opt, w, 1);
  EXPECT_EQ(scaler.get_scale(), 64.0);  // 2 -> 8 -> 32 -> 64 (capped), held
}

TEST(GradScalerExtras, ThrowsWhenStuckAtMinScale) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  // 0.1 is not an f32: the floor is compared as stored.
  GradScaler scaler({.init_scale = 0.4, .min_scale = 0.1, .on_min_scale = OnMinScale::kThrow});
  iterate(scaler, opt, w, kInf);
  iterate(scaler, opt, w, kInf);
  EXPECT_EQ(scaler.get_scale(), double(0.1f));
  try {
    iterate(scaler, opt, w, kInf);
    ADD_FAILURE() << "expected an error at min_scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("min_scale"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("diverging"), std::string::npos) << e.what();
  }
}

TEST(GradScalerExtras, StatisticsAndHistory) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 16.0, .growth_interval = 2});
  const float grads[] = {1, 1, kInf, 1, kInf, kInf, 1};
  for (float g : grads) iterate(scaler, opt, w, g);
  const GradScalerStats s = scaler.stats();
  EXPECT_EQ(s.steps, 7);
  EXPECT_EQ(s.skipped_steps, 3);
  EXPECT_EQ(s.consecutive_skips, 0);
  EXPECT_EQ(s.last_overflow_step, 5);
  // Growth after iterations 0 and 1, backoffs at 2, 4 and 5: 16 -> 32 -> 16 -> 8 -> 4.
  EXPECT_EQ(s.scale, 4.0);
  // Only changes are recorded: {first iteration that uses the scale, scale}.
  const std::vector<std::pair<int64_t, double>> expected = {{0, 16}, {2, 32}, {3, 16}, {5, 8}, {6, 4}};
  ASSERT_EQ(s.history.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(s.history[i].step, expected[i].first) << i;
    EXPECT_EQ(s.history[i].scale, expected[i].second) << i;
  }
}

TEST(GradScalerExtras, ExtensionsSurviveStateRoundTrip) {
  Tensor w = zeros({1}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 1.0});
  GradScaler a({.init_scale = 32.0, .hysteresis = 2, .min_scale = 1.0, .max_scale = 1024.0});
  iterate(a, opt, w, kInf);
  GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.options().hysteresis, 2);
  EXPECT_EQ(b.options().min_scale, 1.0);
  EXPECT_EQ(b.options().max_scale, 1024.0);
  EXPECT_EQ(b.stats().skipped_steps, 1);
  iterate(b, opt, w, kInf);  // the second overflow in a row, counted across the save
  EXPECT_EQ(b.get_scale(), 16.0);
}

// bf16 has fp32's exponent range, so scaling is usually unneeded there; with the scaler on, a bf16
// product's grads are scaled and unscaled like f16's.
TEST(GradScalerExtras, Bf16WithScalerEnabled) {
  Tensor w = ones({8}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 0.5});
  GradScaler scaler({.init_scale = 1024.0});
  Tensor x = full({8}, 3.0, {.dtype = DType::kBF16});
  scaler.scale(sum(mul(w.to(DType::kBF16), x))).backward();
  EXPECT_EQ(w.grad().data<float>()[0], 3072.0f);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(w.data<float>()[0], 1.0f - 0.5f * 3.0f);  // unscaled exactly (power-of-two scale)
}

TEST(GradScalerExtras, OffByDefaultForBf16OnForF16) {
  EXPECT_EQ(scaler_defaults_for(DType::kF16).state, ScalerState::kEnabled);
  EXPECT_EQ(scaler_defaults_for(DType::kBF16).state, ScalerState::kDisabled);
  EXPECT_EQ(scaler_defaults_for(DType::kF32).state, ScalerState::kDisabled);
  GradScaler bf16(scaler_defaults_for(DType::kBF16));
  EXPECT_EQ(bf16.scale(full({}, 3.0)).item(), 3.0) << "a disabled scaler returns the loss unscaled";
  EXPECT_THROW(scaler_defaults_for(DType::kI64), Error);
}

}  // namespace
}  // namespace mantissa::amp
