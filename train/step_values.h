// The values the host reads of one optimizer step (TrainerConfig::step_read_lag): its loss, the ranks' stop
// votes, its grad norm and the loss scaler's scale and found_inf. They are made on the device as the step is
// enqueued, laid out in one f64 record that a single HostCopy brings to pinned host memory, and decoded
// there. The Trainer decides when a step is read and what a stop vote does; this file knows where each
// value sits. In the order a step makes them (StepValues.OneRankWithAScalerRoundTrips does this):
//
//   StepValues layout({.world_size = 1, .scaler = true});
//   StepValues::Builder record(layout, device);
//   record.loss(mean_loss, stop_vote(stop));  // with several ranks: all-reduce what this returns
//   record.grad_norm(norm);
//   record.scaler(scale, found_inf);
//   HostCopy copy = std::move(record).start_copy();
//   ... a step or more later:
//   StepHostValues v = layout.decode(copy.wait());
#pragma once

#include <csignal>
#include <cstdint>
#include <vector>

#include "framework/host_read.h"
#include "framework/tensor.h"
#include "train/stop.h"

namespace mantissa {

// Slots of the stop vote: signal numbers 0 (no signal) to NSIG - 1.
inline constexpr int kStopSlots = NSIG;

// This process's stop vote: -1 when no stop is requested, else the signal that asked for it (0: a request
// without one), a number past the slots counted in the last one.
int stop_vote(const StopRequest& stop);

struct StepValuesOptions {
  // More than one: the ranks sum the loss slots in an all-reduce, so the loss is their sum (divided by
  // world_size when decoded) and the ranks' stop votes follow it.
  int world_size = 1;
  bool scaler = false;  // a loss scaler runs: the record has the scale the step used and its found_inf
  bool fp8 = false;     // FP8 training: the record ends with the run's FP8 overflow count so far
};

// One step's values on the host.
struct StepHostValues {
  double loss = 0.0;          // the mean over the step's micro-batches and the ranks
  int stop = -1;              // with several ranks, the stop most of them voted for; -1: none (always with one)
  double grad_norm = 0.0;     // total L2 norm of the unscaled grads
  double scale = 1.0;         // the loss scale the step used; 1 without a scaler
  bool found_inf = false;     // the scaler found an inf or nan grad and skipped the step; false without a scaler
  int64_t fp8_overflows = 0;  // FP8 casts that overflowed, this rank's, in the run so far; 0 without FP8
};

// The record's layout: the loss, with several ranks followed by kStopSlots stop slots (slot 1 + s counts
// the ranks that voted to stop for signal s), then the grad norm, then with a scaler the scale and found_inf,
// then with FP8 the overflow count.
class StepValues {
 public:
  explicit StepValues(StepValuesOptions options);

  int64_t loss_slot() const { return 0; }
  int64_t stop_slot(int signal) const;  // with several ranks only
  int64_t grad_norm_slot() const { return grad_norm_slot_; }
  int64_t scale_slot() const;         // with a scaler only
  int64_t found_inf_slot() const;     // with a scaler only
  int64_t fp8_overflow_slot() const;  // with FP8 only
  int64_t size() const;               // f64 elements of the record
  const StepValuesOptions& options() const { return options_; }

  // One step's record on the device (below).
  class Builder;

  // The values of a record that reached the host (HostCopy::wait()).
  StepHostValues decode(const Tensor& record) const;

 private:
  StepValuesOptions options_;
  int64_t grad_norm_slot_;
};

// One step's record, built on `device` in the order the step makes its values: loss(), grad_norm(),
// scaler() (with a scaler), fp8_overflows() (with FP8), start_copy(). Nothing is read on the host.
class StepValues::Builder {
 public:
  Builder(StepValues layout, Device device) : layout_(layout), device_(device) {}

  // The loss slots: the step's mean loss (one f64 element, on the device) and, with several ranks, this
  // rank's stop_vote() after it. Returns them as one tensor of the record, which the ranks must all-reduce
  // (ReduceOp::kSum, in place) before start_copy().
  Tensor loss(const Tensor& mean_loss, int stop_vote);
  // The total grad norm (one element).
  void grad_norm(const Tensor& norm);
  // The scale the step used (one f64 element on the device, copied before the scaler's update changes
  // it) and the found_inf of its step.
  void scaler(const Tensor& scale, const Tensor& found_inf);
  // The FP8 overflow count (amp::Fp8Context::overflow_total(), a 0-d i64 on the device), after the scaler's.
  void fp8_overflows(const Tensor& total);
  // Concatenates the record and starts its copy to the host.
  HostCopy start_copy() &&;

 private:
  StepValues layout_;
  Device device_;
  std::vector<Tensor> parts_;  // in the record's order
};

}  // namespace mantissa
