// MetricSinks: the files a run's metrics go to, the JSON lines (TrainerConfig::metrics_path, train/metrics.h)
// and the TensorBoard event files (TrainerConfig::tensorboard_dir, train/tensorboard.h). Both are opened,
// written, fsynced and checked at the same points of a run; the Trainer calls one method per point, and a
// sink that is not configured (or a rank other than 0, which the Trainer gives no paths) does nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "train/grad_histogram.h"
#include "train/metrics.h"
#include "train/tensorboard.h"

namespace mantissa {

struct MetricSinksOptions {
  std::string metrics_path;     // JSON lines; empty: none
  std::string tensorboard_dir;  // event files; empty: none
  int64_t histogram_every = 0;  // steps between gradient histograms in the event files; 0: none
};

class MetricSinks {
 public:
  MetricSinks() = default;  // no sink
  explicit MetricSinks(MetricSinksOptions options) : options_(std::move(options)) {}

  // Opens the sinks for a run that stands at `step`. 0: a new run (the metrics file is replaced, the event
  // file opens with START at step 0); past 0, a resumed run or fit() called again: the metrics file keeps
  // its lines up to `step` and is appended to, and the new event file opens with START at step + 1, so that
  // TensorBoard replaces the points the folder holds after `step`. Each call opens a new event file (the
  // one before is closed); the metrics file stays as it was when it cannot be opened again. Errors name the
  // file; when the metrics file fails the event file just made is removed, so nothing is left of a run that
  // did not start.
  absl::Status open(int64_t step);

  // Whether step `step` writes gradient histograms (the event file is open and `step` is a multiple of
  // histogram_every); the caller computes them only then.
  bool histograms_due(int64_t step) const;
  // A step's line and event, and its histograms' event when there are some.
  void write(const StepMetrics& m, const std::optional<GradientHistograms>& histograms);
  // An evaluation's line and event; the event file is then fsynced.
  void write(const EvalMetrics& m);
  // The "stopped" line; returns the metrics file's status after it.
  absl::Status write(const StopEvent& stop);
  // fsyncs the event file (at each checkpoint).
  void flush();
  // The end of a run's part: fsyncs the event file, then writes the summary line unless a stop ended the
  // run (it is not over). The first error, the event file's before the metrics file's.
  absl::Status finish(const RunSummary& summary);
  // The first error of an earlier write, the metrics file's before the event file's; ok while all went well.
  absl::Status status() const;

 private:
  MetricSinksOptions options_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace mantissa
