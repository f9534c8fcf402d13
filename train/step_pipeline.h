// StepPipeline: the Trainer's optimizer steps between their enqueue and their read
// (TrainerConfig::step_read_lag). A step's values stay on the device as it is enqueued: its loss (with
// several ranks all-reduced together with their stop votes), grad norm, scale and found_inf go into one f64
// record (train/step_values.h) that one HostCopy brings to pinned host memory. The pipeline keeps the steps
// in flight, says when the oldest is due, and reads it into StepMetrics: the loss, the stop the ranks
// agreed on, the skipped-step count and the step's samples/s. What a step computes is the Trainer's.
//
//   StepPipeline::Step step = pipeline.start(layout, device);
//   step.add_micro_batch(loss, batch_size);        // each micro-batch, before its backward
//   pipeline.share_loss(step);                     // after the backward: the loss slots' all-reduce starts
//   step.values().grad_norm(norm);  ...            // the rest of the record, in its order
//   pipeline.push(std::move(step));                // its copy to the host starts
//   while (pipeline.due(StepPipeline::Due::kLagged)) emit(pipeline.read());
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "framework/device.h"
#include "framework/dist/process_group.h"
#include "framework/host_read.h"
#include "framework/tensor.h"
#include "train/grad_histogram.h"
#include "train/metrics.h"
#include "train/step_values.h"
#include "train/stop.h"

namespace mantissa {

// Seconds on the steady clock: the wall times and samples/s of the pipeline and the Trainer.
double steady_seconds();

struct StepPipelineOptions {
  // More than one rank: each step's loss slots are all-reduced over `group`, and the ranks stop on the
  // votes a step carries. Not owned.
  ProcessGroup* group = nullptr;
  int world_size = 1;
  // Steps the host may run ahead of the values it reads (TrainerConfig::step_read_lag, resolved: >= 0).
  int64_t read_lag = 0;
  // This process's stop request, voted as each step is enqueued (and, with one rank, asked as it is read).
  // Not owned.
  const StopRequest* stop = nullptr;
};

class StepPipeline {
 public:
  // One step as the Trainer enqueues it.
  class Step {
   public:
    StepMetrics metrics;                           // what is known as it is enqueued: step, epoch, lr
    std::optional<GradientHistograms> histograms;  // when the step writes them

    // One micro-batch: its loss (added on the device in f64, in order: the sum the host would make of the
    // item()s) and its examples on this rank. Before the micro-batch's backward.
    void add_micro_batch(const Tensor& loss, int64_t examples);
    // The step's record, after the loss slots (StepPipeline::share_loss): grad_norm(), scaler(), ....
    StepValues::Builder& values() { return values_; }

   private:
    friend class StepPipeline;
    Step(StepValues layout, Device device);

    StepValues::Builder values_;
    StepValuesOptions layout_;
    Tensor loss_sum_;  // f64, on the device
    int64_t micro_batches_ = 0;
    int64_t examples_ = 0;
    double start_s_ = 0.0;
    std::unique_ptr<Work> loss_work_;  // with several ranks: the all-reduce of the loss slots
  };

  // A step read: its metrics and the gradient histograms it writes, if any.
  struct ReadStep {
    StepMetrics metrics;
    std::optional<GradientHistograms> histograms;
  };

  enum class Due {
    kLagged,  // the steps more than read_lag behind the newest one
    kAll,     // every step in flight (before an evaluation, a checkpoint or the end of the run)
  };

  StepPipeline() = default;
  explicit StepPipeline(StepPipelineOptions options);

  // At the start of fit(): nothing in flight, no stop agreed, no samples/s yet; the skipped-step count
  // goes on from `skipped_steps` (the scaler's, over the resumed parts of the run too).
  void begin(int64_t skipped_steps);

  // A step starts now, its record laid out as `layout` says and built on `device`.
  Step start(StepValuesOptions layout, Device device) const;
  // After the step's last backward: the mean of its micro-batches' losses and this rank's stop vote go
  // into its record; with several ranks their all-reduce starts, to run while the optimizer steps (every
  // rank starts it before the scaler's found_inf all-reduce, so the order of collectives matches).
  void share_loss(Step& step) const;
  // The step is enqueued: its values start their way to the host (with NCCL the stream, not the host,
  // waits for the loss all-reduce first).
  void push(Step step);

  bool due(Due which) const;
  // The oldest step in flight, once its values have landed on the host.
  ReadStep read();

  // The stop the ranks agreed on (a signal number, 0 for a request without one), from the first step read
  // that carried a request; none until then.
  std::optional<int> agreed_stop() const;
  // The median samples/s of the steps read in this fit() after the first `warmup` (all of them when there
  // are no more).
  double median_samples_per_s(int64_t warmup) const;

 private:
  // A step on its way to the host.
  struct InFlight {
    StepMetrics metrics;
    std::optional<GradientHistograms> histograms;
    StepValuesOptions layout;
    HostCopy values;
    int64_t examples = 0;  // of this rank
    double start_s = 0.0;
    // With several ranks, the step's loss all-reduce: asked again when the step is read, so that a
    // collective the process group's watchdog aborted (its timeout, a peer lost) raises its error there,
    // before the run goes on to log, evaluate or checkpoint what the aborted step left.
    std::unique_ptr<Work> loss_work;
  };

  StepPipelineOptions options_;
  std::deque<InFlight> in_flight_;     // enqueued steps not read yet, oldest first
  double last_read_s_ = -1.0;          // when the last step was read (-1: none in this fit())
  int64_t skipped_steps_ = 0;          // the scaler's skipped steps as of the last step read
  int agreed_stop_ = -1;               // -1: none
  std::vector<double> samples_per_s_;  // per step read in this fit(), of all ranks
};

}  // namespace mantissa
