// The scaling state of one tensor role of one FP8 linear, on the device, and its update math. Every function
// here runs ops on the state's device and reads nothing back to the host, so a training step with delayed
// scaling never synchronizes (stats() in amp/fp8.h is where values come to the host).
//
// Delayed scaling (Transformer Engine's DelayedScaling). The history is a ring of N f32 amaxes; entry `slot`
// belongs to the current step. Every cast of the role folds its amax into that entry (max), so the micro-
// batches of an accumulated step share one entry. At the end of the step (Fp8Context::step, after the
// optimizer):
//   amax  = max over the N entries (kMax) or the current entry (kMostRecent)
//   scale = (fp8_max / amax) / 2^margin   if amax is finite and > 0, else the previous scale
//   scale_inv = 1 / scale; the slot moves to the next entry, which is set to 0 (the oldest amax drops out).
// The first step casts with scale 1, as TE's. All in f32, as TE computes it on the GPU.
//
// Dynamic scaling (torchao's tensorwise): every cast computes scale = fp8_max / max(amax(x), 1e-12) /
// 2^margin from the tensor it casts. The state then only records: one history entry (the step's largest
// amax, for stats) and the scale of the last cast.
#pragma once

#include <cstdint>

#include "amp/fp8_recipe.h"
#include "framework/tensor.h"

namespace mantissa::amp {

struct Fp8TensorState {
  Fp8TensorScaling scaling;
  DType dtype = DType::kF8E4M3;  // what the role is cast to
  Fp8Overflow overflow = Fp8Overflow::kSaturate;
  Tensor amax_history;  // [N] f32, a ring; N = scaling.history_len when delayed, 1 when dynamic
  int64_t slot = 0;     // the current step's entry: (steps taken) % N
  Tensor scale;         // 0-d f32: what the next cast multiplies by (delayed); the last cast's (dynamic)
  Tensor scale_inv;     // 0-d f32: 1 / scale, the dequantization factor scaled_mm takes
  Tensor amax;          // 0-d f32: the amax the last end of step used (for stats); 0 before the first
  // 0-d f64: elements of this role that overflowed the format in the run (saved in state_dict). f64 because the ops add
  // floating tensors only; it counts exactly up to 2^53.
  Tensor overflow_count;
  // 0-d f64: finite non-zero elements of this role that became 0 (flushed by the scale) in the run; saved in
  // state_dict.
  Tensor underflow_count;

  // A fresh state on `device`: history 0, scale 1, counters 0.
  static Fp8TensorState make(const Fp8TensorScaling& scaling, DType dtype, Fp8Overflow overflow, Device device);
  int64_t history_len() const { return amax_history.size(0); }
  Device device() const { return amax_history.device(); }
  void to(Device device);
};

// Folds one cast's amax (0-d f32) into the current history entry (max; a nan stays) and adds its overflow
// count (0-d, any dtype: quantize_fp8's is i64) to the counter. fp8_cast (amp/fp8_linear.h) calls neither this
// nor fp8_dynamic_scale: quantize_fp8 (ops/fp8/fp8.h, Fp8CastOptions) does their arithmetic inside the cast;
// these composed forms stay as its reference (tests/amp/fp8_cast_fold_test.cc).
void fp8_record(Fp8TensorState& s, const Tensor& amax, const Tensor& overflow);

// The end of a step for one role, as the header says: the new scale (delayed), the amax it came from, and the
// slot moved on to a zeroed entry.
void fp8_end_step(Fp8TensorState& s);

// (fp8_max / amax) / 2^margin where amax is finite and > 0, else `previous` (0-d f32 tensors, one device).
Tensor fp8_delayed_scale(const Tensor& amax, const Tensor& previous, DType fp8, int64_t margin);
// fp8_max / max(amax, 1e-12) / 2^margin (0-d f32): torchao's tensorwise scale with TE's margin.
Tensor fp8_dynamic_scale(const Tensor& amax, DType fp8, int64_t margin);
// 1 / scale in f32.
Tensor fp8_reciprocal(const Tensor& scale);

// The history newest first (entry 0 the current step's, entry k the one k steps before): the order of
// checkpoints, independent of where the ring happens to stand. And back: sets the ring from that order.
Tensor fp8_history_newest_first(const Fp8TensorState& s);
void fp8_set_history_newest_first(Fp8TensorState& s, const Tensor& newest_first);

}  // namespace mantissa::amp
