// The GradScaler's update() rule over plain values: PyTorch's _amp_update_scale_ (backoff on an overflow,
// growth after growth_interval clean steps, never to inf) plus the extensions (hysteresis, min/max scale,
// the step statistics). One function that g++ and nvcc both compile: the CPU scaler's update() runs it
// on host values, the CUDA scaler in a single-thread kernel on state that lives in device memory
// (tests/cuda/amp_kernels_test.cc checks the kernel against this host call).
#pragma once

#include <cstdint>

#include "framework/host_device.h"
#include "framework/rounding.h"

namespace mantissa::amp {

// When the scaler's hysteresis count (the overflows it absorbs before backing off) is refilled. Both
// rules back off from the `hysteresis`-th overflow counted since the last refill on, at each further one
// too, and agree when hysteresis is 1 (PyTorch's behaviour); they differ on overflows separated by clean
// steps. With hysteresis 2, "overflow, clean, overflow, clean, ..." never backs off under kOnCleanStep
// (every other step is skipped for as long as the pattern lasts) and backs off at the second overflow
// under kOnGrowth.
// - kOnCleanStep: every clean step refills it, so only overflows in a row count. DeepSpeed's
//   DynamicLossScaler with consecutive_hysteresis=True (not its default).
// - kOnGrowth: only a growth refills it, i.e. growth_interval clean steps in a row (also when max_scale
//   or f32's range keeps the scale where it is). Megatron-LM's DynamicGradScaler, and DeepSpeed's
//   default (consecutive_hysteresis=False).
// The values are what GradScaler::state_dict() saves under "hysteresis_refill".
enum class HysteresisRefill : int { kOnCleanStep = 0, kOnGrowth = 1 };

}  // namespace mantissa::amp

namespace mantissa::amp::loss_scale {

// The scaler's options as the rule needs them. throw_at_min_scale: OnMinScale::kThrow.
struct Rule {
  double growth_factor, backoff_factor;
  int64_t growth_interval, hysteresis;
  HysteresisRefill hysteresis_refill;
  double min_scale, max_scale;
  bool throw_at_min_scale;
};

// The counters the rule keeps besides the scale, in this order in the CUDA scaler's i64 tensor.
enum Counter : int {
  kGrowthTracker,
  kConsecutiveOverflows,  // GradScalerStats::consecutive_skips: reset by every clean step
  kHysteresisOverflows,   // overflows since the last refill, at most `hysteresis` (0 after a refill)
  kSteps,
  kSkippedSteps,
  kLastOverflowStep,   // -1: none
  kFloorOverflowStep,  // -1, or the iteration whose overflow found the scale at min_scale under kThrow
  kNumCounters
};

// The counters of a scaler that has not updated yet (no overflow counted against hysteresis).
MT_HD inline void initial_counters(int64_t* counters) {
  for (int i = 0; i < kNumCounters; ++i) counters[i] = 0;
  counters[kLastOverflowStep] = -1;
  counters[kFloorOverflowStep] = -1;
}

// One update(): `scale` is the f32 scale, `inv_scale` receives float(1 / double(scale)) (what unscale_
// and the fused step multiply by, PyTorch's scale.double().reciprocal().float()).
MT_HD inline void apply_rule(float& scale, float& inv_scale, int64_t* counters, bool found_inf, const Rule& r) {
  const int64_t iteration = counters[kSteps]++;
  const double current = scale;
  if (found_inf) {
    counters[kGrowthTracker] = 0;
    counters[kConsecutiveOverflows] += 1;
    counters[kSkippedSteps] += 1;
    counters[kLastOverflowStep] = iteration;
    if (counters[kHysteresisOverflows] < r.hysteresis) counters[kHysteresisOverflows] += 1;
    if (counters[kHysteresisOverflows] >= r.hysteresis) {
      // Compared as stored (f32), as the CPU scaler does.
      const bool at_floor = static_cast<float>(current) <= static_cast<float>(r.min_scale);
      if (r.throw_at_min_scale && at_floor) {
        // The CPU scaler throws here, before the scale changes; the host reports it at its next look.
        if (counters[kFloorOverflowStep] < 0) counters[kFloorOverflowStep] = iteration;
      } else {
        const double backed_off = rn::mul(current, r.backoff_factor);
        scale = static_cast<float>(backed_off > r.min_scale ? backed_off : r.min_scale);
      }
    }
  } else {
    counters[kConsecutiveOverflows] = 0;
    if (r.hysteresis_refill == HysteresisRefill::kOnCleanStep) counters[kHysteresisOverflows] = 0;
    if (++counters[kGrowthTracker] == r.growth_interval) {
      const double grown = rn::mul(current, r.growth_factor);
      const float next = static_cast<float>(grown < r.max_scale ? grown : r.max_scale);
      // Never grows to inf (PyTorch's rule): next - next is 0 only for a finite value.
      if (next - next == 0.0f) scale = next;
      counters[kGrowthTracker] = 0;
      counters[kHysteresisOverflows] = 0;  // kOnGrowth's refill (kOnCleanStep's count is 0 already)
    }
  }
  inv_scale = static_cast<float>(rn::div(1.0, static_cast<double>(scale)));
}

}  // namespace mantissa::amp::loss_scale
