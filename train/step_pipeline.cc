// StepPipeline (train/step_pipeline.h): steps in flight, their read, stop votes and throughput.
#include "train/step_pipeline.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "train/statistics.h"

namespace mantissa {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

StepPipeline::Step::Step(StepValues layout, Device device)
    : values_(layout, device), layout_(layout.options()), start_s_(steady_seconds()) {}

void StepPipeline::Step::add_micro_batch(const Tensor& loss, int64_t examples) {
  NoGradGuard no_grad;
  const Tensor wide = loss.detach().to(DType::kF64);
  loss_sum_ = loss_sum_.defined() ? add(loss_sum_, wide) : wide;
  ++micro_batches_;
  examples_ += examples;
}

StepPipeline::StepPipeline(StepPipelineOptions options) : options_(options) {
  MT_CHECK(options_.world_size >= 1 && (options_.world_size == 1 || options_.group != nullptr),
           "StepPipeline: world_size ", options_.world_size, " needs a process group when above 1");
  MT_CHECK(options_.read_lag >= 0, "StepPipeline: read_lag must be >= 0, got ", options_.read_lag);
  MT_CHECK(options_.stop != nullptr, "StepPipeline: no stop request was given");
}

void StepPipeline::begin(int64_t skipped_steps) {
  in_flight_.clear();
  last_read_s_ = -1.0;
  skipped_steps_ = skipped_steps;
  agreed_stop_ = -1;
  samples_per_s_.clear();
}

StepPipeline::Step StepPipeline::start(StepValuesOptions layout, Device device) const {
  return Step(StepValues(layout), device);
}

void StepPipeline::share_loss(Step& step) const {
  MT_ASSERT(step.micro_batches_ > 0, "StepPipeline: a step without micro-batches shares no loss");
  NoGradGuard no_grad;
  // The logged loss is the mean over the micro-batches and, after the all-reduce, over the ranks (comparable
  // with a one-process run of the whole batch). The same all-reduce carries the ranks' stop votes
  // (train/step_values.h), so that a request on any rank stops all of them after the same step without a
  // collective of its own.
  const int64_t micro = step.micro_batches_;
  const Tensor shared = step.values_.loss(micro > 1 ? div(step.loss_sum_, static_cast<double>(micro)) : step.loss_sum_,
                                          stop_vote(*options_.stop));
  if (options_.world_size > 1) step.loss_work_ = options_.group->all_reduce_async(shared, ReduceOp::kSum);
}

void StepPipeline::push(Step step) {
  if (step.loss_work_) step.loss_work_->wait();  // with NCCL the stream waits, not the host
  in_flight_.push_back({.metrics = step.metrics,
                        .histograms = std::move(step.histograms),
                        .layout = step.layout_,
                        .values = std::move(step.values_).start_copy(),
                        .examples = step.examples_,
                        .start_s = step.start_s_,
                        .loss_work = std::move(step.loss_work_)});
}

bool StepPipeline::due(Due which) const {
  const size_t keep = which == Due::kAll ? 0 : static_cast<size_t>(options_.read_lag);
  return in_flight_.size() > keep;
}

StepPipeline::ReadStep StepPipeline::read() {
  MT_ASSERT(!in_flight_.empty(), "StepPipeline: no step in flight to read");
  InFlight s = std::move(in_flight_.front());
  in_flight_.pop_front();
  const StepHostValues v = StepValues(s.layout).decode(s.values.wait());
  // The values came through the all-reduce, done by now: asking again raises a watchdog's abort.
  MT_CHECK(!s.loss_work || s.loss_work->is_completed(), "Trainer: step ", s.metrics.step,
           "'s loss all-reduce has not completed although its values were read");
  StepMetrics m = s.metrics;
  m.loss = v.loss;
  // One process asks its own StopRequest as each step is read: a request made while step N was in flight
  // (from step N - 1's callback, a signal) stops the run after step N + step_read_lag. Ranks must agree:
  // they take the votes carried by the step read (the reason most ranks gave), so theirs stop one
  // step_read_lag later.
  const int agreed = options_.world_size > 1 ? v.stop : stop_vote(*options_.stop);
  if (agreed_stop_ < 0) agreed_stop_ = agreed;  // the first step read that carries a request decides
  m.grad_norm = v.grad_norm;
  if (s.layout.scaler) {
    m.scale = v.scale;
    m.skipped = v.found_inf;
    skipped_steps_ += m.skipped ? 1 : 0;
    m.skipped_steps = skipped_steps_;
  }
  if (s.layout.fp8) m.fp8_overflows = v.fp8_overflows;
  // The step's time from its start, or (the host running ahead) from when the step before it was read:
  // in a steady state that is how long the device took for it.
  const double now = steady_seconds();
  const double elapsed = now - std::max(s.start_s, last_read_s_);
  last_read_s_ = now;
  // Every rank takes as many examples per step (the Trainer checks that the loaders match): this is all of them.
  m.samples_per_s = elapsed > 0 ? static_cast<double>(s.examples * options_.world_size) / elapsed : 0.0;
  samples_per_s_.push_back(m.samples_per_s);
  return {.metrics = m, .histograms = std::move(s.histograms)};
}

std::optional<int> StepPipeline::agreed_stop() const {
  return agreed_stop_ >= 0 ? std::optional<int>(agreed_stop_) : std::nullopt;
}

double StepPipeline::median_samples_per_s(int64_t warmup) const {
  return median_after(samples_per_s_, static_cast<size_t>(warmup));
}

}  // namespace mantissa
