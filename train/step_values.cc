// StepValues: the layout of a step's f64 record, its building on the device and its decoding on the host.
#include "train/step_values.h"

#include <algorithm>

#include "framework/error.h"
#include "ops/shape/shape.h"

namespace mantissa {

int stop_vote(const StopRequest& stop) { return stop.requested() ? std::clamp(stop.signal(), 0, kStopSlots - 1) : -1; }

StepValues::StepValues(StepValuesOptions options)
    : options_(options), grad_norm_slot_(options.world_size > 1 ? 1 + kStopSlots : 1) {
  MT_CHECK(options.world_size >= 1, "StepValues: world_size must be >= 1, got ", options.world_size);
}

int64_t StepValues::stop_slot(int signal) const {
  MT_CHECK(options_.world_size > 1, "StepValues: a record of one rank has no stop slots");
  MT_CHECK(signal >= 0 && signal < kStopSlots, "StepValues: signal ", signal, " has no stop slot (0 to ",
           kStopSlots - 1, ")");
  return 1 + signal;
}

int64_t StepValues::scale_slot() const {
  MT_CHECK(options_.scaler, "StepValues: a record without a loss scaler has no scale");
  return grad_norm_slot_ + 1;
}

int64_t StepValues::found_inf_slot() const {
  MT_CHECK(options_.scaler, "StepValues: a record without a loss scaler has no found_inf");
  return grad_norm_slot_ + 2;
}

int64_t StepValues::fp8_overflow_slot() const {
  MT_CHECK(options_.fp8, "StepValues: a record without FP8 has no overflow count");
  return grad_norm_slot_ + (options_.scaler ? 3 : 1);
}

int64_t StepValues::size() const { return grad_norm_slot_ + (options_.scaler ? 3 : 1) + (options_.fp8 ? 1 : 0); }

Tensor StepValues::Builder::loss(const Tensor& mean_loss, int stop_vote) {
  MT_ASSERT(parts_.empty(), "StepValues::Builder: the loss comes first");
  Tensor slots = mean_loss.reshape({1});
  if (layout_.options_.world_size > 1) {
    std::vector<double> stops(kStopSlots, 0.0);
    if (stop_vote >= 0) stops[static_cast<size_t>(stop_vote)] = 1.0;
    slots = cat({slots, from_vector(stops).to(device_)});
  }
  parts_.push_back(slots);
  return slots;
}

void StepValues::Builder::grad_norm(const Tensor& norm) {
  MT_ASSERT(parts_.size() == 1, "StepValues::Builder: the grad norm comes after the loss");
  parts_.push_back(norm.reshape({1}).to(device_));
}

void StepValues::Builder::scaler(const Tensor& scale, const Tensor& found_inf) {
  MT_ASSERT(layout_.options_.scaler && parts_.size() == 2,
            "StepValues::Builder: the scaler's values come after the grad norm, in a record with a scaler");
  parts_.push_back(scale.reshape({1}));
  parts_.push_back(found_inf.to(DType::kF64).reshape({1}));
}

void StepValues::Builder::fp8_overflows(const Tensor& total) {
  MT_ASSERT(layout_.options_.fp8 && parts_.size() == (layout_.options_.scaler ? 4u : 2u),
            "StepValues::Builder: the FP8 overflow count comes last, in a record with FP8");
  // An f64 holds a count exactly up to 2^53.
  parts_.push_back(total.to(DType::kF64).reshape({1}));
}

HostCopy StepValues::Builder::start_copy() && {
  const size_t parts = (layout_.options_.scaler ? 4u : 2u) + (layout_.options_.fp8 ? 1u : 0u);
  MT_ASSERT(parts_.size() == parts, "StepValues::Builder: the record has ", parts_.size(), " of its ", parts, " parts");
  return HostCopy(cat(parts_));
}

StepHostValues StepValues::decode(const Tensor& record) const {
  MT_CHECK(record.dtype() == DType::kF64 && record.numel() == size(), "StepValues::decode: expected ", size(),
           " f64 values, got ", record.numel(), " of ", dtype_name(record.dtype()));
  const double* v = record.data<double>();
  StepHostValues out;
  // What ReduceOp::kAvg computes (exact for one rank).
  out.loss = v[loss_slot()] / static_cast<double>(options_.world_size);
  if (options_.world_size > 1) {
    // The reason most ranks were given (a signal before a plain request when as many had each).
    double most = 0.0;
    for (int k = 1; k <= kStopSlots; ++k) {
      const int slot = k % kStopSlots;  // 1 ... kStopSlots - 1, then 0
      if (v[stop_slot(slot)] > most) most = v[stop_slot(slot)], out.stop = slot;
    }
  }
  out.grad_norm = v[grad_norm_slot_];
  if (options_.scaler) {
    out.scale = v[scale_slot()];
    out.found_inf = v[found_inf_slot()] != 0.0;
  }
  if (options_.fp8) out.fp8_overflows = static_cast<int64_t>(v[fp8_overflow_slot()]);
  return out;
}

}  // namespace mantissa
