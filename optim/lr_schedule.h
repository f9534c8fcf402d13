// Learning-rate schedules. A Schedule is a pure function from the step count to a multiplier of each
// group's base lr, built from constant, step_decay, linear, cosine and combined with sequential (one after
// another, each restarting its count at its milestone, as PyTorch's SequentialLR) or chained (the product,
// as ChainedScheduler). LRScheduler applies one to an optimizer. Because a schedule has no hidden state,
// saving (step, base lrs) restores it exactly.
//
//   LRScheduler sched(adamw, warmup_cosine({.warmup_steps = 100, .total_steps = 10000}));
//   for (...) { ...; adamw.step(); sched.step(); }
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace mantissa {

class Schedule {
 public:
  explicit Schedule(std::function<double(int64_t)> factor);
  // The lr multiplier at `step` (0: before the first optimizer step).
  double operator()(int64_t step) const { return (*factor_)(step); }

 private:
  std::shared_ptr<const std::function<double(int64_t)>> factor_;
};

// factor, at every step.
Schedule constant(double factor = 1.0);

// gamma^floor(step / step_size) (StepLR).
struct StepDecayOptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};
Schedule step_decay(StepDecayOptions options);

// From start_factor at step 0 to end_factor at total_steps, linearly, then end_factor (LinearLR's closed
// form; start_factor 0 is allowed). Warmup: {.start_factor = 0, .end_factor = 1, .total_steps = n};
// linear decay: {.start_factor = 1, .end_factor = 0, .total_steps = n}.
struct LinearScheduleOptions {
  double start_factor = 1.0 / 3.0;
  double end_factor = 1.0;
  int64_t total_steps = 5;
};
Schedule linear(LinearScheduleOptions options);

// min_factor + (1 - min_factor) * (1 + cos(pi * step / total_steps)) / 2 up to total_steps, then min_factor
// (CosineAnnealingLR's closed form with eta_min = min_factor * base lr; PyTorch's keeps oscillating past
// T_max, this one holds the minimum).
struct CosineOptions {
  int64_t total_steps = 1;
  double min_factor = 0.0;
};
Schedule cosine(CosineOptions options);

// schedules[0] until milestones[0], then schedules[1] counting from 0 at milestones[0], and so on.
Schedule sequential(std::vector<Schedule> schedules, std::vector<int64_t> milestones);
// The product of the factors.
Schedule chained(std::vector<Schedule> schedules);

// Linear warmup from warmup_start_factor to 1 over warmup_steps, then cosine to min_factor at total_steps:
// sequential({linear(...), cosine(...)}, {warmup_steps}).
struct WarmupCosineOptions {
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double warmup_start_factor = 0.0;
  double min_factor = 0.0;
};
Schedule warmup_cosine(WarmupCosineOptions options);

struct LRSchedulerState {
  int64_t step = 0;
  std::vector<double> base_lrs;  // one per param group
};

class LRScheduler {
 public:
  // Takes each group's current lr as its base lr and sets lr = base * schedule(0), as PyTorch's schedulers
  // do on construction. The optimizer must outlive the scheduler.
  LRScheduler(Optimizer& optimizer, Schedule schedule);
  // Call after optimizer.step(): advances the count and sets lr = base * schedule(step) in every group.
  void step();
  int64_t last_step() const { return step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  LRSchedulerState state_dict() const { return {.step = step_, .base_lrs = base_lrs_}; }
  // Restores the count and base lrs and sets the optimizer's lrs from them.
  void load_state_dict(const LRSchedulerState& state);

 private:
  void apply();
  Optimizer& optimizer_;
  Schedule schedule_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

}  // namespace mantissa
