// GradScaler: dynamic loss scaling for f16 training, with torch.amp.GradScaler's contract (scale, unscale_,
// step, update, state_dict, the same misuse errors), and beyond it: hysteresis, min/max scale, a loud
// failure when the scale is stuck at its floor, and statistics with a compact scale history.
//
//   amp::GradScaler scaler;                         // init_scale 2^16, growth 2, backoff 0.5, interval 2000
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                           // optional: only to clip or inspect unscaled grads
//   clip_grad_norm_(params, 1.0);
//   bool applied = scaler.step(opt);                // false: an inf/nan grad, nothing changed
//   scaler.update();
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "amp/loss_scale_rule.h"
#include "framework/tensor.h"
#include "optim/optimizer.h"

namespace mantissa {
class ProcessGroup;
}

namespace mantissa::amp {

enum class ScalerState { kEnabled, kDisabled };
// What update() does when an overflow asks for a backoff but the scale already sits at min_scale.
enum class OnMinScale { kContinue, kThrow };

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
  // kDisabled: scale() returns the loss, step() is a plain step, update() does nothing (PyTorch's enabled=False).
  ScalerState state = ScalerState::kEnabled;
  // Beyond PyTorch. hysteresis: the overflows counted (since the count was last refilled) before a backoff;
  // from the hysteresis-th on, each overflow backs off until the next refill. 1 = PyTorch (every overflow
  // backs off; then the refill rule does not matter); Megatron-LM and DeepSpeed configs often use 2. Every
  // overflow still skips its step and resets the growth tracker.
  int64_t hysteresis = 1;
  // When the count is refilled (amp/loss_scale_rule.h says which library does which). The default,
  // kOnCleanStep (only overflows in a row count, DeepSpeed's consecutive_hysteresis=True), is the rule
  // every mantissa scaler ran before the option existed, so a run resumed from such a checkpoint goes
  // on exactly as it would have. kOnGrowth is Megatron-LM's and DeepSpeed's default: pick it to match
  // them, and to back off under overflows that keep coming between clean steps (kOnCleanStep never
  // backs off on "overflow, clean, overflow, ..." and skips every other step while that lasts).
  HysteresisRefill hysteresis_refill = HysteresisRefill::kOnCleanStep;
  double min_scale = 0.0;                                      // backoff never goes below (0: no floor)
  double max_scale = std::numeric_limits<double>::infinity();  // growth never goes above
  OnMinScale on_min_scale = OnMinScale::kContinue;
  size_t history_capacity = 256;  // scale changes kept by stats().history (the oldest dropped first)
  // Data parallelism: found_inf is agreed by the ranks of this group (one MAX all-reduce per optimizer and
  // iteration, where unscale_ or the fused step finds it), so every rank skips the same steps and keeps the
  // same scale. Not owned; must outlive the scaler. Null (or a world of one): this process decides alone.
  ProcessGroup* process_group = nullptr;
};

// The defaults for a run whose lower precision is `precision`: enabled for f16 (its 5-bit exponent
// underflows small gradients), disabled for bf16 and f32 (fp32's exponent range: nothing to rescue).
// Any field can still be overridden, and an enabled scaler works with bf16 too.
GradScalerOptions scaler_defaults_for(DType precision);

// One entry of the scale history: the scale used from iteration `step` (0-based, counting update() calls)
// on. Compact: only changes are recorded.
struct ScaleChange {
  int64_t step;
  double scale;
};

struct GradScalerStats {
  int64_t steps = 0;              // update() calls that combined inf checks (training iterations)
  int64_t skipped_steps = 0;      // of those, iterations whose step was skipped (an inf or nan grad)
  int64_t consecutive_skips = 0;  // skipped iterations since the last clean one
  // How many more overflows it takes to back off the scale: hysteresis after a refill, one less per
  // overflow; at 1 the next overflow backs off, at 0 (used up) every overflow does until the next refill.
  int64_t hysteresis_left = 1;
  int64_t last_overflow_step = -1;   // index (0-based, counting update() calls) of the last skip; -1: none
  double scale = 1.0;                // the current scale
  std::vector<ScaleChange> history;  // starts with {0, init_scale}; on CUDA sampled when the host asks
};

// A scaler's state as named numbers, PyTorch's keys first: "scale", "growth_factor", "backoff_factor",
// "growth_interval", "_growth_tracker"; then the extensions "hysteresis", "hysteresis_refill" (the
// HysteresisRefill value), "min_scale", "max_scale", "_consecutive_overflows", "_hysteresis_overflows"
// (overflows counted since the last refill), "_steps", "_skipped_steps", "_last_overflow_step". A
// disabled scaler's state is empty (as PyTorch's).
using GradScalerState = std::map<std::string, double>;

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  bool is_enabled() const { return options_.state == ScalerState::kEnabled; }
  // loss * scale (the scale as an f32 tensor, so the product follows type promotion); the loss itself when
  // disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's grads by the scale in one pass that also records whether any is inf or nan
  // (inv_scale = float(1 / double(scale))). At most once per optimizer between update()s, before step().
  void unscale_(Optimizer& optimizer);
  // The optimizer's update unless an inf/nan grad was found; returns whether it was applied. Without an
  // earlier unscale_ it runs the fused Optimizer::step(GradScaling) (the kernel unscales and skips).
  // Throws, as PyTorch's "No inf checks were recorded for this optimizer", when none of the optimizer's
  // parameters has a grad (unscale_ itself accepts that, as PyTorch's does).
  bool step(Optimizer& optimizer);
  // step() without asking whether it was applied. On CUDA it is written to read nothing on the host: the
  // fused kernels read found_inf on the device, so that unscale_, enqueue_step and update never wait for the
  // GPU and can be captured in a CUDA graph (no GPU has run it yet: docs/gpu.md). On the CPU it is step().
  void enqueue_step(Optimizer& optimizer);
  // Backs off on an overflow (from the `hysteresis`-th since the count's refill), else grows after
  // growth_interval clean steps (amp/loss_scale_rule.h, the rule the CUDA scaler runs too);
  // combines every optimizer's inf check since the last update and readies them for the next iteration.
  void update();
  // Sets the scale (tracker and counters left alone) and readies the optimizers; no inf check needed.
  void update(double new_scale);

  // 1.0 when disabled.
  double get_scale() const;
  // For a loop that reads nothing on the host per iteration (the Trainer on a GPU), two values as tensors on
  // the scaler's device, to copy to the host later: the scale in use (the f32 scalar itself, which update()
  // changes: copy it first), and whether this iteration's inf check of `optimizer` found an inf or nan (f32
  // 0 or 1; between step/enqueue_step and update(), the flag the step obeyed). Enabled scalers only.
  const Tensor& scale_tensor() const;
  Tensor found_inf(const Optimizer& optimizer) const;
  int64_t growth_tracker() const;
  double growth_factor() const { return options_.growth_factor; }
  double backoff_factor() const { return options_.backoff_factor; }
  int64_t growth_interval() const { return options_.growth_interval; }
  const GradScalerOptions& options() const { return options_; }
  GradScalerStats stats() const;

  GradScalerState state_dict() const;
  // Throws on an empty state (saved by a disabled scaler) or a missing/unknown key; does nothing when
  // this scaler is disabled.
  void load_state_dict(const GradScalerState& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    Tensor found_inf;  // f32 scalar; undefined until an inf check ran this iteration
  };
  void require_inf_check(const Optimizer& optimizer, const PerOptimizer& s) const;
  loss_scale::Rule rule() const;
  [[noreturn]] void throw_at_min_scale(int64_t iteration, int64_t consecutive_skips) const;
  Tensor inv_scale_tensor() const;
  void set_scale(double scale);
  void agree_found_inf(const Tensor& found_inf) const;

  // CUDA (amp/grad_scaler_cuda.cc). The scaler moves to the GPU of the first CUDA loss or grads it sees;
  // from then on scale, inv_scale and the counters (loss_scale::Counter) live there, the
  // update runs there, and the host fields below the line are only what was last loaded or moved.
  bool on_device() const { return scale_.device().is_cuda(); }
  // Whether `optimizer`'s grads are on CUDA (moving the scaler to their device on first use).
  bool cuda_grads(const Optimizer& optimizer);
  void to_device(Device device);
  void unscale_cuda(Optimizer& optimizer, PerOptimizer& s);
  void step_cuda(Optimizer& optimizer, PerOptimizer& s);
  void update_cuda();
  void set_scale_cuda(double scale);
  // The trackers and statistics: the host fields, or on CUDA the device's (one host read; the history
  // then gains the current scale if it changed since the last entry).
  struct Counters {
    int64_t growth_tracker, consecutive_overflows, hysteresis_overflows;
    GradScalerStats stats;
  };
  Counters counters() const;
  // The trackers and statistics as the rule's counter array (amp/loss_scale_rule.h), and back into
  // `into` (its history untouched): one mapping for the host update, the device upload and the device read.
  void pack_counters(int64_t* c) const;
  static void unpack_counters(const int64_t* c, Counters& into);
  void counters_to_device(double scale);  // and inv_scale from `scale`, the scale as the host knows it
  Tensor inv_scale_dev_;                  // f32 scalar, float(1 / double(scale)), kept by the update kernel
  Tensor counters_dev_;                   // i64 [loss_scale::kNumCounters]
  Tensor one_dev_;                        // f32 scalar 1: the fused step's inv_scale after an explicit unscale_
  std::map<const Optimizer*, Tensor> found_inf_dev_;  // per-optimizer flags, zeroed and reused each iteration

  GradScalerOptions options_;
  Tensor scale_;  // f32 scalar
  int64_t growth_tracker_ = 0;
  int64_t consecutive_overflows_ = 0;
  int64_t hysteresis_overflows_ = 0;  // loss_scale::kHysteresisOverflows
  // Keyed by address: this is per-iteration bookkeeping, reset by update(), never saved.
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;
  GradScalerStats stats_;
};

}  // namespace mantissa::amp
