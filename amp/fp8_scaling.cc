// The FP8 scaling state's update math, with device ops only (amp/fp8_scaling.h).
#include "amp/fp8_scaling.h"

#include <cmath>
#include <vector>

#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"

namespace mantissa::amp {
namespace {

Tensor f32_scalar(double v, Device device) { return full({}, v, {.dtype = DType::kF32, .device = device}); }

// The ring position of newest-first entry k: k steps before the current slot.
Tensor ring_index(int64_t slot, int64_t n, Device device) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) idx[static_cast<size_t>(k)] = ((slot - k) % n + n) % n;
  return from_vector(idx).to(device);
}

}  // namespace

Fp8TensorState Fp8TensorState::make(const Fp8TensorScaling& scaling, DType dtype, Fp8Overflow overflow, Device device) {
  MT_CHECK(is_float8(dtype), "Fp8TensorState: ", dtype_name(dtype), " is not an FP8 dtype");
  const int64_t n = scaling.scaling == Fp8Scaling::kDelayed ? scaling.history_len : 1;
  MT_CHECK(n >= 1, "Fp8TensorState: history_len must be at least 1, got ", n);
  Fp8TensorState s{.scaling = scaling, .dtype = dtype, .overflow = overflow};
  s.amax_history = zeros({n}, {.dtype = DType::kF32, .device = device});
  s.scale = f32_scalar(1.0, device);
  s.scale_inv = f32_scalar(1.0, device);
  s.amax = f32_scalar(0.0, device);
  s.overflow_count = zeros({}, {.dtype = DType::kF64, .device = device});
  s.underflow_count = zeros({}, {.dtype = DType::kF64, .device = device});
  return s;
}

void Fp8TensorState::to(Device device) {
  for (Tensor* t : {&amax_history, &scale, &scale_inv, &amax, &overflow_count, &underflow_count}) *t = t->to(device);
}

void fp8_record(Fp8TensorState& s, const Tensor& amax, const Tensor& overflow) {
  const Tensor current = s.amax_history.select(0, s.slot);
  // max over the pair, not a comparison: a nan amax must stay in the history (it keeps the scale).
  copy_(current, max(stack({current, amax.to(DType::kF32)})));
  s.overflow_count = add(s.overflow_count, overflow.to(DType::kF64));
}

Tensor fp8_delayed_scale(const Tensor& amax, const Tensor& previous, DType fp8, int64_t margin) {
  const Tensor computed =
      div(div(f32_scalar(fp8_max(fp8), amax.device()), amax), std::ldexp(1.0, static_cast<int>(margin)));
  // amax > 0 is false for a nan too; |amax| < inf excludes inf (whose scale would be 0).
  return where(gt(amax, 0.0), where(lt(abs(amax), INFINITY), computed, previous), previous);
}

Tensor fp8_dynamic_scale(const Tensor& amax, DType fp8, int64_t margin) {
  return div(div(f32_scalar(fp8_max(fp8), amax.device()), clamp(amax, 1e-12, std::nullopt)),
             std::ldexp(1.0, static_cast<int>(margin)));
}

Tensor fp8_reciprocal(const Tensor& scale) { return div(f32_scalar(1.0, scale.device()), scale); }

void fp8_end_step(Fp8TensorState& s) {
  const Tensor current = s.amax_history.select(0, s.slot);
  if (s.scaling.scaling == Fp8Scaling::kDelayed) {
    const Tensor amax = s.scaling.amax_compute == AmaxCompute::kMax ? max(s.amax_history) : current.clone();
    // New tensors, not in-place writes: a graph that saved the old scale_inv for its backward keeps its value.
    s.scale = fp8_delayed_scale(amax, s.scale, s.dtype, s.scaling.margin);
    s.scale_inv = fp8_reciprocal(s.scale);
    s.amax = amax;
  } else {
    s.amax = current.clone();
  }
  s.slot = (s.slot + 1) % s.history_len();
  fill_(s.amax_history.select(0, s.slot), 0.0);
}

Tensor fp8_history_newest_first(const Fp8TensorState& s) {
  return index_select(s.amax_history, 0, ring_index(s.slot, s.history_len(), s.device()));
}

void fp8_set_history_newest_first(Fp8TensorState& s, const Tensor& newest_first) {
  MT_CHECK(newest_first.dim() == 1 && newest_first.size(0) == s.history_len(),
           "fp8_set_history_newest_first: expected [", s.history_len(), "], got ", shape_str(newest_first.shape()));
  // ring[(slot - k) mod n] = newest_first[k], i.e. ring[j] = newest_first[(slot - j) mod n]: the same map.
  s.amax_history =
      index_select(newest_first.to(DType::kF32).to(s.device()), 0, ring_index(s.slot, s.history_len(), s.device()))
          .contiguous();
}

}  // namespace mantissa::amp
