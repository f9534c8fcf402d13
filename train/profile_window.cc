// mantissa-train --profile's window of steps: start, stop, print the table, write the trace.
#include "train/profile_window.h"

#include <cerrno>
#include <cstring>
#include <omp.h>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/cpu_peak.h"
#include "framework/error.h"

namespace mantissa {

ProfileWindow::ProfileWindow(std::string trace_path, int64_t start_after, int64_t steps, int64_t trainer_step, int rank,
                             int world_size, std::FILE* out)
    : path_(std::move(trace_path)),
      start_after_(start_after),
      steps_(steps),
      rank_(rank),
      world_size_(world_size),
      out_(out) {
  on_step(trainer_step);
}

absl::Status ProfileWindow::check_writable() const {
  const std::string probe = path_ + ".partial";
  std::FILE* f = std::fopen(probe.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--profile=", path_, ": cannot write the trace there: ", std::strerror(errno)));
  }
  std::fclose(f);
  std::remove(probe.c_str());
  return absl::OkStatus();
}

void ProfileWindow::on_step(int64_t step) {
  if (step == start_after_ && !profiler_.running()) {
    first_step_ = step + 1;
    profiler_.start();
  } else if (step == start_after_ + steps_ && profiler_.running()) {
    error_.Update(stop_and_write());
  }
}

absl::Status ProfileWindow::finish() {
  if (profiler_.running()) error_.Update(stop_and_write());
  return error_;
}

double ProfileWindow::peak_gflops() const {
  if (!peak_dtype_) return 0;
  return gemm_peak_gflops(measure_cpu_peaks(omp_get_max_threads(), 0.2), *peak_dtype_);
}

absl::Status ProfileWindow::stop_and_write() {
  const profiler::Profile profile = profiler_.stop();
  std::fprintf(out_, "--- profile of steps %lld..%lld (self time, this rank) ---\n%s",
               static_cast<long long>(first_step_), static_cast<long long>(first_step_ + steps_ - 1),
               profile.table({.row_limit = 25, .peak_gflops = peak_gflops()}).c_str());
  const profiler::MemoryPeak peak = profile.memory_peak();
  if (peak.time_ns >= 0) {
    std::string where;
    for (const std::string& s : peak.stack) where += (where.empty() ? "" : " > ") + s;
    std::fprintf(out_, "CPU memory peak: %.1f MiB allocated, during %s\n",
                 static_cast<double>(peak.allocated) / (1 << 20), where.empty() ? "no recorded event" : where.c_str());
    if (describe_resident_) std::fprintf(out_, "  of which %s\n", describe_resident_().c_str());
  }
  try {
    profile.export_chrome_trace(path_, rank_, world_size_);
  } catch (const Error& e) {
    return absl::InternalError(absl::StrCat("--profile: ", e.what()));
  }
  std::fprintf(out_, "trace: %s (open it in ui.perfetto.dev or chrome://tracing)\n", path_.c_str());
  return absl::OkStatus();
}

}  // namespace mantissa
