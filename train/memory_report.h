// mantissa-train --report=memory: where a training step's memory goes, per precision (and with activation
// checkpointing where the model has it), and the largest batch that fits in a budget, predicted from two
// batch sizes and checked by a run at the predicted one. Measured with the CPU caching allocator's counters
// (framework/allocator.h): bytes held by live tensors, rounded to the allocator's size classes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/module.h"
#include "optim/optimizer.h"

namespace mantissa {

// One step's memory.
struct MemoryParts {
  std::string label;  // "fp32", "bf16 + recompute", ...
  int64_t batch = 0;
  uint64_t weights = 0;          // the parameters (fp32 masters)
  uint64_t working_copies = 0;   // the optimizer's persistent 16-bit copies of them
  uint64_t gradients = 0;        // the parameters' .grad after backward
  uint64_t optimizer_state = 0;  // moments, step counts
  // What the forward left alive for backward (saved activations, the loss): allocated after the forward
  // minus before it.
  uint64_t activations = 0;
  uint64_t peak = 0;     // the most allocated during the step (forward, backward, optimizer step)
  uint64_t at_rest = 0;  // allocated before the step's forward: weights, state, data, everything kept
};

// What a model and its optimizer hold now: weights, working copies, gradients, optimizer state (the other
// fields zero).
MemoryParts resident_parts(Module& model, const Optimizer& optimizer);

// Runs two steps (the first makes the optimizer's state) of `step_loss` (a forward returning the loss, under
// the caller's autocast), backward and `optimizer.step()`, and measures the second.
MemoryParts measure_step_memory(std::string label, int64_t batch, Module& model, Optimizer& optimizer,
                                const std::function<Tensor()>& step_loss);

// The largest batch whose step peak stays within `budget_bytes`: the peak as a line in the batch size through
// two measured points, solved for the budget.
struct BatchFit {
  uint64_t budget = 0;
  double fixed_bytes = 0;  // the line at batch 0
  double bytes_per_example = 0;
  int64_t predicted = 0;  // 0: not even one example fits
  int64_t checked = 0;    // the batch the check ran (the prediction, or a cap on it)
  uint64_t checked_peak = 0;
  int stepped_down = 0;  // steps over the budget before `checked`
  bool fits() const { return checked > 0 && checked_peak <= budget; }
  // "so the largest batch within it is 290; a step at batch 290 peaked at 74.9 MiB: within the budget".
  std::string summary() const;
};
BatchFit fit_batch(uint64_t budget_bytes, const MemoryParts& small, const MemoryParts& large);

// The line from batch `batch` and 2 `batch` (peak_at(b): a measured step's peak at batch b), then a step at the
// prediction (at most `cap`); while that step is over the budget, one at 90% of the batch, at most 8 times.
// `checked` is the batch of the last step run, `checked_peak` its peak.
BatchFit find_batch_for_budget(uint64_t budget_bytes, int64_t batch, int64_t cap,
                               const std::function<uint64_t(int64_t)>& peak_at);

// The table: one column per measurement.
std::string memory_table(const std::vector<MemoryParts>& rows);
std::string format_bytes(uint64_t bytes);

}  // namespace mantissa
