// What the host did while a Trainer ran, in order, for the tests of its read order (the CPU's in
// trainer_test.cc, the GPU's in tests/cuda/host_read_cuda_test.cc): "L" a training loss was computed (with
// one micro-batch per step the n-th "L" starts step n), "W" a HostCopy was waited for, "S<n>" step n was
// emitted, and any other host read by its name (framework/host_read.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "framework/host_read.h"
#include "train/trainer.h"

namespace mantissa {

struct ReadOrderLog {
  std::vector<std::string> events;

  // `task` with its loss logging "L"; the log must outlive the Trainer's use of it.
  Task logging_loss(Task task) {
    task.loss = [this, loss = std::move(task.loss)](const Example& batch) {
      events.push_back("L");
      return loss(batch);
    };
    return task;
  }
  void log_steps(Trainer& trainer) {
    trainer.on_step_end([this](const StepMetrics& m) { events.push_back("S" + std::to_string(m.step)); });
  }
  // Logs the calling thread's host reads while it lives.
  ScopedHostReadObserver observe_reads() {
    return ScopedHostReadObserver(
        [this](HostRead r) { events.push_back(r == HostRead::kHostCopyWait ? "W" : host_read_name(r)); });
  }

  // The order with step_read_lag 1 over `steps` steps: step n's values are read once step n + 1's loss is
  // computed, the last one at the end.
  static std::vector<std::string> expected_with_lag_one(int64_t steps) {
    std::vector<std::string> expected;
    for (int64_t n = 1; n <= steps; ++n) {
      expected.push_back("L");
      if (n > 1) expected.insert(expected.end(), {"W", "S" + std::to_string(n - 1)});
    }
    expected.insert(expected.end(), {"W", "S" + std::to_string(steps)});
    return expected;
  }
};

}  // namespace mantissa
