// The GradScaler's update() rule over plain values: PyTorch's _amp_update_scale_ (backoff on an overflow,
// growth after growth_interval clean steps, never to inf) plus the extensions (hysteresis, min/max scale,
// the step statistics). One function that g++ and nvcc both compile: the CUDA scaler runs it in a
// single-thread kernel on state that lives in device memory, and tests/amp/loss_scale_rule_test.cc
// checks it against amp::GradScaler's CPU update() over overflow, growth and hysteresis sequences.
#pragma once

#include <cstdint>

#include "optim/update_math.h"

namespace mantissa::update_math {

// The scaler's options as the rule needs them. throw_at_min_scale: OnMinScale::kThrow.
struct LossScaleRule {
  double growth_factor, backoff_factor;
  int64_t growth_interval, hysteresis;
  double min_scale, max_scale;
  bool throw_at_min_scale;
};

// The counters the rule keeps besides the scale, in this order in the CUDA scaler's i64 tensor.
enum LossScaleCounter : int {
  kGrowthTracker,
  kConsecutiveOverflows,  // also GradScalerStats::consecutive_skips (the CPU scaler keeps both equal)
  kSteps,
  kSkippedSteps,
  kLastOverflowStep,   // -1: none
  kFloorOverflowStep,  // -1, or the iteration whose overflow found the scale at min_scale under kThrow
  kNumLossScaleCounters
};

// One update(): `scale` is the f32 scale, `inv_scale` receives float(1 / double(scale)) (what unscale_
// and the fused step multiply by, PyTorch's scale.double().reciprocal().float()).
MT_HD inline void apply_loss_scale_rule(float& scale, float& inv_scale, int64_t* counters, bool found_inf,
                                        const LossScaleRule& r) {
  const int64_t iteration = counters[kSteps]++;
  const double current = scale;
  if (found_inf) {
    counters[kGrowthTracker] = 0;
    counters[kConsecutiveOverflows] += 1;
    counters[kSkippedSteps] += 1;
    counters[kLastOverflowStep] = iteration;
    if (counters[kConsecutiveOverflows] >= r.hysteresis) {
      // Compared as stored (f32), as the CPU scaler does.
      const bool at_floor = static_cast<float>(current) <= static_cast<float>(r.min_scale);
      if (r.throw_at_min_scale && at_floor) {
        // The CPU scaler throws here, before the scale changes; the host reports it at its next look.
        if (counters[kFloorOverflowStep] < 0) counters[kFloorOverflowStep] = iteration;
      } else {
        const double backed_off = mul(current, r.backoff_factor);
        scale = static_cast<float>(backed_off > r.min_scale ? backed_off : r.min_scale);
      }
    }
  } else {
    counters[kConsecutiveOverflows] = 0;
    if (++counters[kGrowthTracker] == r.growth_interval) {
      const double grown = mul(current, r.growth_factor);
      const float next = static_cast<float>(grown < r.max_scale ? grown : r.max_scale);
      // Never grows to inf (PyTorch's rule): next - next is 0 only for a finite value.
      if (next - next == 0.0f) scale = next;
      counters[kGrowthTracker] = 0;
    }
  }
  inv_scale = static_cast<float>(div(1.0, static_cast<double>(scale)));
}

}  // namespace mantissa::update_math
