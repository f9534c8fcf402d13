// MetricSinks: the JSON lines file and the TensorBoard event file of a run, at each point of it.
#include "train/metric_sinks.h"

#include <utility>

#include "absl/status/statusor.h"

namespace mantissa {

absl::Status MetricSinks::open(int64_t step) {
  tensorboard_.reset();
  if (!options_.tensorboard_dir.empty()) {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer =
        TensorBoardWriter::open(options_.tensorboard_dir, step > 0 ? step + 1 : 0);
    if (!writer.ok()) return writer.status();
    tensorboard_ = *std::move(writer);
  }
  if (!options_.metrics_path.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsWriter>> writer =
        step > 0 ? MetricsWriter::open_resumed(options_.metrics_path, step)
                 : MetricsWriter::open(options_.metrics_path);
    if (!writer.ok()) {
      if (tensorboard_) tensorboard_->discard();  // nothing is left of a run that did not start
      return writer.status();
    }
    metrics_ = *std::move(writer);
  }
  return absl::OkStatus();
}

bool MetricSinks::histograms_due(int64_t step) const {
  const int64_t every = options_.histogram_every;
  return tensorboard_ && every > 0 && step % every == 0;
}

void MetricSinks::write(const StepMetrics& m, const std::optional<GradientHistograms>& histograms) {
  if (metrics_) metrics_->write(m);
  if (tensorboard_) {
    tensorboard_->write(m);
    if (histograms) tensorboard_->write(m.step, *histograms);
  }
}

void MetricSinks::write(const EvalMetrics& m) {
  if (metrics_) metrics_->write(m);
  if (tensorboard_) {
    tensorboard_->write(m);
    tensorboard_->flush();
  }
}

absl::Status MetricSinks::write(const StopEvent& stop) {
  if (!metrics_) return absl::OkStatus();
  metrics_->write(stop);
  return metrics_->status();
}

void MetricSinks::flush() {
  if (tensorboard_) tensorboard_->flush();
}

absl::Status MetricSinks::finish(const RunSummary& summary) {
  if (tensorboard_) {
    tensorboard_->flush();
    if (!tensorboard_->status().ok()) return tensorboard_->status();
  }
  if (metrics_ && !summary.stopped) {
    metrics_->write(summary);
    if (!metrics_->status().ok()) return metrics_->status();
  }
  return absl::OkStatus();
}

absl::Status MetricSinks::status() const {
  if (metrics_ && !metrics_->status().ok()) return metrics_->status();
  if (tensorboard_ && !tensorboard_->status().ok()) return tensorboard_->status();
  return absl::OkStatus();
}

}  // namespace mantissa
