// mantissa-train --profile: a profiler session around a window of training steps (after `wait` steps, for
// `steps` steps; torch.profiler's schedule(wait, active)), then the per-op table printed and the Chrome trace
// written (framework/profiler/profile.h). A run that ends inside the window ends the session with it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "framework/dtype.h"
#include "framework/profiler/profile.h"

namespace mantissa {

class ProfileWindow {
 public:
  // Profiles steps start_after + 1 ... start_after + steps (start_after: the Trainer's step when it starts, plus
  // the warm-up steps). Starts at once when the Trainer is at step start_after already.
  ProfileWindow(std::string trace_path, int64_t start_after, int64_t steps, int64_t trainer_step, int rank,
                int world_size, std::FILE* out);
  // What the memory peak's line adds: the bytes the model and optimizer hold (train/memory_report.h), so
  // that the rest reads as activations, temporaries and data.
  void describe_resident(std::function<std::string()> describe) { describe_resident_ = std::move(describe); }
  // The %peak column: the table's GFLOP/s rows against this CPU's measured peak for GEMMs in `dtype`
  // (framework/cpu_peak.h, measured when the window closes, for about a second).
  void measure_peak_for(DType dtype) { peak_dtype_ = dtype; }

  // Before the run: whether the trace can be written where asked (a missing folder, no permission), so that
  // a bad path fails before any training, naming the file.
  absl::Status check_writable() const;
  // After optimizer step `step` (the Trainer's step callback): starts or ends the session. A trace that
  // cannot be written is kept as the error finish() returns.
  void on_step(int64_t step);
  // After the run: ends a session still open, and returns the first error. Ok when the window never opened
  // (the run was shorter).
  absl::Status finish();

 private:
  absl::Status stop_and_write();
  double peak_gflops() const;

  std::string path_;
  int64_t start_after_, steps_;
  absl::Status error_;
  int rank_, world_size_;
  std::FILE* out_;
  profiler::Profiler profiler_;
  int64_t first_step_ = 0;
  std::function<std::string()> describe_resident_;
  std::optional<DType> peak_dtype_;
};

}  // namespace mantissa
