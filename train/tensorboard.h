// TensorBoard event files of a training run (mantissa-train --tensorboard=DIR, TrainerConfig::tensorboard_dir),
// so that `tensorboard --logdir DIR` shows the run as PyTorch users see theirs from SummaryWriter:
//
//   train/loss, train/lr, train/grad_norm, train/samples_per_s   every step (StepMetrics)
//   amp/loss_scale, amp/skipped_steps (cumulative)               every step
//   eval/loss, eval/accuracy (classifiers)                       every evaluation (EvalMetrics)
//   grad/log2_abs, grad/values (histograms),                     every tensorboard_histogram_every steps
//   grad/zero_fraction, grad/nonfinite_fraction                  (train/grad_histogram.h)
//
// A resumed run writes a new file in the same folder that opens with a SessionLog START at its first step:
// TensorBoard then drops what the folder's earlier files hold from that step on (the steps the stopped run
// took after its checkpoint), so each curve has every step once. The file's records are written whole, one
// write() each, so a crash leaves only whole records; flush() (at each evaluation, checkpoint and the end)
// also fsyncs them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/grad_histogram.h"
#include "train/metrics.h"
#include "train/tensorboard_record.h"

namespace mantissa {

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new file events.out.tfevents.<unix time>.<host>.<pid> in it; its
  // first records are file_version and SessionLog START at `first_step` (0 for a new run: the curves of an
  // earlier run in the same folder are then replaced, as --metrics replaces its file; the step after the
  // checkpoint for a resumed run). The time in the name is past every other events file's in `dir`, so that
  // TensorBoard, which reads a folder's files in name order, reads this one last. Errors name the folder or
  // file and the reason; nothing is left behind when the file's first records cannot be written.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir, int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event (one record) each, with the tags listed at the top of this file.
  void write(const StepMetrics& m);
  void write(const EvalMetrics& m);
  void write(int64_t step, const GradientHistograms& h);
  // Any values at `step`, in one event.
  void write(int64_t step, std::span<const tensorboard::SummaryValue> values);
  // fsyncs what was written.
  void flush();
  // An error from an earlier write (disk full ...), naming the file; ok while all went well. After an error
  // nothing more is written: the file keeps the whole records written before it.
  absl::Status status() const { return status_; }
  const std::string& path() const { return path_; }
  // Removes the file (a run that fails before its first step leaves nothing behind).
  void discard();

 private:
  TensorBoardWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void put_record(const std::string& event);
  std::string path_;
  int fd_;
  int64_t size_ = 0;  // bytes of whole records in the file
  absl::Status status_;
};

}  // namespace mantissa
