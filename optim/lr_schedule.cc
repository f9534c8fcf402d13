// LR schedules as closed forms of the step count, and the scheduler that writes them into the groups.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "framework/error.h"

namespace mantissa {

Schedule::Schedule(std::function<double(int64_t)> factor)
    : factor_(std::make_shared<const std::function<double(int64_t)>>(std::move(factor))) {
  MT_CHECK(*factor_, "Schedule: the factor function is empty");
}

Schedule constant(double factor) {
  return Schedule([factor](int64_t) { return factor; });
}

Schedule step_decay(StepDecayOptions o) {
  MT_CHECK(o.step_size > 0, "step_decay: step_size must be positive, got ", o.step_size);
  return Schedule([o](int64_t step) { return std::pow(o.gamma, static_cast<double>(step / o.step_size)); });
}

Schedule linear(LinearScheduleOptions o) {
  MT_CHECK(o.total_steps > 0, "linear: total_steps must be positive, got ", o.total_steps);
  return Schedule([o](int64_t step) {
    // LinearLR's closed form, in its order of operations.
    return o.start_factor +
           (o.end_factor - o.start_factor) * static_cast<double>(std::min(o.total_steps, step)) / o.total_steps;
  });
}

Schedule cosine(CosineOptions o) {
  MT_CHECK(o.total_steps > 0, "cosine: total_steps must be positive, got ", o.total_steps);
  return Schedule([o](int64_t step) {
    const double t = static_cast<double>(std::min(step, o.total_steps));
    return o.min_factor + (1.0 - o.min_factor) * (1.0 + std::cos(std::numbers::pi * t / o.total_steps)) / 2.0;
  });
}

Schedule sequential(std::vector<Schedule> schedules, std::vector<int64_t> milestones) {
  MT_CHECK(!schedules.empty() && milestones.size() + 1 == schedules.size(), "sequential: ", schedules.size(),
           " schedules need ", schedules.empty() ? 0 : schedules.size() - 1, " milestones, got ", milestones.size());
  MT_CHECK(std::is_sorted(milestones.begin(), milestones.end()), "sequential: milestones must be increasing");
  return Schedule([schedules, milestones](int64_t step) {
    const size_t i = std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
    return schedules[i](i == 0 ? step : step - milestones[i - 1]);
  });
}

Schedule chained(std::vector<Schedule> schedules) {
  MT_CHECK(!schedules.empty(), "chained: needs at least one schedule");
  return Schedule([schedules](int64_t step) {
    double factor = 1.0;
    for (const auto& s : schedules) factor *= s(step);
    return factor;
  });
}

Schedule warmup_cosine(WarmupCosineOptions o) {
  MT_CHECK(o.warmup_steps >= 0 && o.warmup_steps < o.total_steps, "warmup_cosine: need 0 <= warmup_steps < ",
           "total_steps, got warmup_steps ", o.warmup_steps, " total_steps ", o.total_steps);
  const Schedule decay = cosine({.total_steps = o.total_steps - o.warmup_steps, .min_factor = o.min_factor});
  if (o.warmup_steps == 0) return decay;
  return sequential(
      {linear({.start_factor = o.warmup_start_factor, .end_factor = 1.0, .total_steps = o.warmup_steps}), decay},
      {o.warmup_steps});
}

LRScheduler::LRScheduler(Optimizer& optimizer, Schedule schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) base_lrs_.push_back(optimizer_.lr(g));
  apply();
}

void LRScheduler::step() {
  ++step_;
  apply();
}

void LRScheduler::apply() {
  const double factor = schedule_(step_);
  for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer_.set_lr(g, base_lrs_[g] * factor);
}

void LRScheduler::load_state_dict(const LRSchedulerState& state) {
  MT_CHECK(state.base_lrs.size() == optimizer_.num_param_groups(), "LRScheduler.load_state_dict: the state has ",
           state.base_lrs.size(), " base lrs, the optimizer has ", optimizer_.num_param_groups(), " param groups");
  MT_CHECK(state.step >= 0, "LRScheduler.load_state_dict: negative step ", state.step);
  step_ = state.step;
  base_lrs_ = state.base_lrs;
  apply();
}

}  // namespace mantissa
