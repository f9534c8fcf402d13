// --report=memory's measurements: one step's parts from the allocator's counters, the batch that fits a
// budget, the table.
#include "train/memory_report.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "framework/allocator.h"
#include "framework/error.h"

namespace mantissa {
namespace {

uint64_t nbytes(const Tensor& t) { return t.defined() ? static_cast<uint64_t>(t.nbytes()) : 0; }

}  // namespace

std::string format_bytes(uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b < (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / (1 << 10));
  } else if (b < (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1ull << 30));
  }
  return buf;
}

MemoryParts measure_step_memory(std::string label, int64_t batch, Module& model, Optimizer& optimizer,
                                const std::function<Tensor()>& step_loss) {
  MemoryParts r;
  r.label = std::move(label);
  r.batch = batch;
  auto step = [&](bool measure) {
    optimizer.zero_grad();
    const uint64_t before = cpu_allocator_stats().allocated_bytes;
    cpu_allocator_reset_peak();
    Tensor loss = step_loss();
    const uint64_t after_forward = cpu_allocator_stats().allocated_bytes;
    loss.backward();
    loss = Tensor();
    if (measure) {
      r.at_rest = before;
      r.activations = after_forward > before ? after_forward - before : 0;
      for (const NamedTensor& p : model.named_parameters()) r.gradients += nbytes(p.tensor.grad());
    }
    optimizer.step();
    if (measure) r.peak = cpu_allocator_stats().peak_allocated_bytes;
  };
  step(false);
  step(true);
  const MemoryParts held = resident_parts(model, optimizer);
  r.weights = held.weights;
  r.working_copies = held.working_copies;
  r.optimizer_state = held.optimizer_state;
  optimizer.zero_grad();
  return r;
}

MemoryParts resident_parts(Module& model, const Optimizer& optimizer) {
  MemoryParts r;
  for (const NamedTensor& p : model.named_parameters()) {
    r.weights += nbytes(p.tensor);
    r.gradients += nbytes(p.tensor.grad());
    r.working_copies += nbytes(optimizer.working_copy(p.name));
    if (const ParamState* s = optimizer.state(p.name)) {
      for (const auto& [name, t] : *s) r.optimizer_state += nbytes(t);
    }
  }
  return r;
}

BatchFit fit_batch(uint64_t budget_bytes, const MemoryParts& small, const MemoryParts& large) {
  MT_CHECK(large.batch > small.batch, "fit_batch: the two measurements need two batch sizes, got ", small.batch,
           " and ", large.batch);
  BatchFit f;
  f.budget = budget_bytes;
  f.bytes_per_example = (static_cast<double>(large.peak) - static_cast<double>(small.peak)) /
                        static_cast<double>(large.batch - small.batch);
  f.fixed_bytes = static_cast<double>(small.peak) - f.bytes_per_example * static_cast<double>(small.batch);
  if (f.bytes_per_example <= 0) {
    f.predicted = -1;  // the peak does not grow with the batch: no limit from this budget
  } else {
    f.predicted = std::max<int64_t>(
        0, static_cast<int64_t>(std::floor((static_cast<double>(budget_bytes) - f.fixed_bytes) / f.bytes_per_example)));
  }
  return f;
}

BatchFit find_batch_for_budget(uint64_t budget_bytes, int64_t batch, int64_t cap,
                               const std::function<uint64_t(int64_t)>& peak_at) {
  MemoryParts small{.batch = batch, .peak = peak_at(batch)}, large{.batch = 2 * batch, .peak = peak_at(2 * batch)};
  BatchFit f = fit_batch(budget_bytes, small, large);
  f.checked = f.predicted < 0 ? cap : std::min(f.predicted, cap);
  for (int tries = 0; f.checked > 0; ++tries) {
    f.checked_peak = peak_at(f.checked);
    if (f.checked_peak <= budget_bytes || tries == 8) break;
    f.checked = f.checked * 9 / 10;
    ++f.stepped_down;
  }
  return f;
}

std::string BatchFit::summary() const {
  if (predicted == 0) return "so not even one example fits";
  std::string s = predicted < 0 ? "which does not grow with the batch"
                                : "so the largest batch within it is " + std::to_string(predicted);
  if (checked <= 0) return s;
  const std::string verdict =
      " peaked at " + format_bytes(checked_peak) + ": " + (fits() ? "within the budget" : "OVER the budget");
  if (stepped_down > 0) {
    return s + "; a step at that batch went over it, and one at batch " + std::to_string(checked) + verdict;
  }
  if (checked == predicted) return s + "; a step at that batch" + verdict;
  return s + "; a step at batch " + std::to_string(checked) + " (the check's cap)" + verdict;
}

std::string memory_table(const std::vector<MemoryParts>& rows) {
  std::ostringstream os;
  char line[256];
  auto row = [&](const char* label, auto&& cell) {
    std::snprintf(line, sizeof line, "%-40s", label);
    os << line;
    for (const MemoryParts& r : rows) {
      std::snprintf(line, sizeof line, " %17s", cell(r).c_str());
      os << line;
    }
    os << "\n";
  };
  row("", [](const MemoryParts& r) { return r.label; });
  row("batch", [](const MemoryParts& r) { return std::to_string(r.batch); });
  row("weights", [](const MemoryParts& r) { return format_bytes(r.weights); });
  row("working copies (16-bit)", [](const MemoryParts& r) { return format_bytes(r.working_copies); });
  row("gradients", [](const MemoryParts& r) { return format_bytes(r.gradients); });
  row("optimizer state", [](const MemoryParts& r) { return format_bytes(r.optimizer_state); });
  row("activations kept for backward", [](const MemoryParts& r) { return format_bytes(r.activations); });
  row("allocated before the forward", [](const MemoryParts& r) { return format_bytes(r.at_rest); });
  row("step peak", [](const MemoryParts& r) { return format_bytes(r.peak); });
  return os.str();
}

}  // namespace mantissa
