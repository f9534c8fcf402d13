// What a training run reports: one record per optimizer step, per evaluation and at the end, and the
// writers that turn them into JSON lines (--metrics), a progress bar or plain lines on the terminal.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mantissa {

// After each optimizer step (step counts from 1; epoch from 0).
struct StepMetrics {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0.0;           // the step's loss (mean over its micro-batches), unscaled
  double lr = 0.0;             // the lr the step used (group 0)
  double scale = 1.0;          // the loss scale the step used (1 without a scaler)
  bool skipped = false;        // the scaler found an inf/nan grad and the update was not applied
  int64_t skipped_steps = 0;   // skipped steps of the run so far, this one included (its resumed parts too)
  double grad_norm = 0.0;      // total L2 norm of the unscaled grads (nan/inf on a skipped step)
  double samples_per_s = 0.0;  // examples of this step / its wall time
  // FP8 training: values the FP8 casts saturated (or turned into inf/nan) in the run so far, its resumed parts
  // included, rank 0's (amp::Fp8Context::overflow_total()); unset without FP8.
  std::optional<int64_t> fp8_overflows;
};

// After each evaluation. accuracy: classifiers only.
struct EvalMetrics {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0.0;
  std::optional<double> accuracy;
};

// A run that ended early because a stop was requested (Trainer::request_stop, a signal; train/stop.h).
struct StopEvent {
  int64_t step = 0;        // the last step taken
  int signal = 0;          // the signal that asked for the stop (0: request_stop without one)
  std::string checkpoint;  // the checkpoint written at the stop; empty: none (no checkpoint_dir, or not rank 0)
};

// At the end of a run, or of its part that a stop ended.
struct RunSummary {
  int64_t steps = 0;
  int64_t skipped_steps = 0;
  double final_scale = 1.0;
  std::optional<double> test_accuracy;  // classifiers
  std::optional<double> val_loss;       // language models
  double samples_per_s = 0.0;           // median over this process's steps after warm-up
  double wall_s = 0.0;                  // since the run started, the parts before a resume included
  std::optional<StopEvent> stopped;     // set when a stop request ended the run before its end
};

// JSON lines, one object per record, numbers with 9 significant digits (float32 round-trips exactly):
//   {"step": 1, "epoch": 0, "loss": 2.30258512, "lr": 0.001, "scale": 65536, "skipped": false, ...}
//   {"event": "eval", "step": 469, "epoch": 0, "loss": 0.45, "accuracy": 0.8412}
//   {"event": "summary", "steps": 2345, "skipped_steps": 3, "final_scale": 32768, "test_accuracy": ..., ...}
//   {"event": "stopped", "step": 285, "signal": "SIGTERM", "checkpoint": "step_285.h5"}  (null: none)
//   {"event": "resumed", "step": 285}
// Non-finite numbers are written as null (JSON has no inf/nan). Each line is flushed when written.
class MetricsWriter {
 public:
  // Creates (truncates) `path`; an error names the file and the reason.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> open(const std::string& path);
  // For a run resumed at `step`: keeps the lines of `path` that the run had written up to that step (steps,
  // evaluations and stop events at or before it; a line cut short by a crash, a summary and anything
  // later are dropped: the stopped process wrote them after its checkpoint), adds {"event": "resumed"},
  // and appends from there, so that the file reads as one run. The kept lines are rewritten atomically
  // (temporary file, fsync, rename). A missing `path` is created.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> open_resumed(const std::string& path, int64_t step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const StepMetrics& m);
  void write(const EvalMetrics& m);
  void write(const RunSummary& m);
  void write(const StopEvent& m);
  // An error from an earlier write (disk full ...), naming the file; ok while all went well.
  absl::Status status() const;

 private:
  MetricsWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  void put_line(const std::string& line);
  std::string path_;
  std::FILE* file_;
  absl::Status status_;
};

// The JSON line of one record (no newline), as MetricsWriter writes it.
std::string to_json(const StepMetrics& m);
std::string to_json(const EvalMetrics& m);
std::string to_json(const RunSummary& m);
std::string to_json(const StopEvent& m);

// The "step" of a JSON line as to_json writes it (step lines, evaluations, stop and resume events); none for
// a summary or a line that is not one of ours.
std::optional<int64_t> metrics_line_step(std::string_view line);

}  // namespace mantissa
