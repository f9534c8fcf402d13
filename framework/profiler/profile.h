// What a profiler session recorded (framework/profiler/profiler.h), and its views: the per-op table
// (torch.profiler's key_averages()), the same as JSON, the Chrome trace file, and the memory over time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "framework/device.h"
#include "framework/profiler/profiler.h"

namespace mantissa::profiler {

inline constexpr uint64_t kNoSequenceNr = ~uint64_t{0};

// One recorded event. Times are nanoseconds from the session's start.
struct Event {
  std::string name;
  Category category = Category::kOp;
  Device device = kCPU;
  uint32_t thread = 0;  // 0, 1, ... in the order threads first recorded
  uint32_t depth = 0;   // events open around it on its thread
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  // The autograd sequence number: on a forward op, that of the node it recorded; on a backward event, its
  // node's. kNoSequenceNr when none.
  uint64_t sequence_nr = kNoSequenceNr;
  double flops = 0;         // GEMM and convolution multiply-adds x 2
  double bytes = 0;         // bytes of the tensors the op read and wrote (an estimate of its memory traffic)
  std::string input_dims;   // JSON, e.g. [[256,784],[1024,784]] (with record_shapes)
  std::string input_types;  // JSON, e.g. ["c10::BFloat16","float"] (PyTorch's names)
  std::string autocast;     // "bf16", "f16" or empty (off)
  // On a GPU (written for it; no device has run it): the time on the device between CUDA events recorded on
  // the current stream at the event's start and end, and when that began on the host clock (approximately:
  // the device timeline is aligned at the session's first mark). -1 when not measured.
  double device_ms = -1;
  int64_t device_start_ns = 0;
  int64_t duration_ns() const { return end_ns - start_ns; }
};

// The allocators' totals after one allocation or free.
struct MemorySample {
  int64_t time_ns = 0;
  Device device = kCPU;
  int64_t bytes = 0;  // this allocation (> 0) or free (< 0)
  uint64_t allocated = 0;
  uint64_t reserved = 0;  // allocated plus what the cache keeps
  uint32_t thread = 0;
};

// One row of the per-op table: the events of one name (and category; with group_by_shape, one input
// shape list).
struct OpStats {
  std::string name;
  Category category = Category::kOp;
  std::string input_dims;  // with group_by_shape
  int64_t calls = 0;
  double total_us = 0;  // the events' durations, children included (an event nested in one of the same
                        // name and kind counts once)
  double self_us = 0;   // minus the time in events nested directly inside
  double flops = 0;
  double bytes = 0;
  double device_us = 0;  // device time of the events measured on a GPU
  // Rates over the total time: an op whose work is in a nested kernel (a cast's copy_) is measured with it.
  double gflops_per_s() const { return total_us > 0 ? flops / (total_us * 1e3) : 0; }
  double gbytes_per_s() const { return total_us > 0 ? bytes / (total_us * 1e3) : 0; }
};

enum class SortBy { kSelfTime, kTotalTime, kCalls, kFlops, kName };

struct TableOptions {
  SortBy sort_by = SortBy::kSelfTime;
  int row_limit = 30;  // <= 0: every row
  bool group_by_shape = false;
  // This machine's peaks (bench/cpu_peak measures them), for the %peak column: GFLOP/s of the rows' GEMM
  // arithmetic and GB/s of memory. 0: the column is left out.
  double peak_gflops = 0;
  double peak_gbytes_per_s = 0;
};

// The moment memory peaked, and what was running then.
struct MemoryPeak {
  uint64_t allocated = 0;
  int64_t time_ns = -1;            // -1: no allocation was recorded
  std::vector<std::string> stack;  // the events open on the allocating thread, outermost first
};

class Profile {
 public:
  Profile() = default;
  Profile(std::vector<Event> events, std::vector<MemorySample> memory, int64_t duration_ns, int64_t base_time_ns,
          uint64_t allocated_at_start);

  // Sorted by thread, then start time, outer before inner.
  const std::vector<Event>& events() const { return events_; }
  const std::vector<MemorySample>& memory() const { return memory_; }
  int64_t duration_ns() const { return duration_ns_; }
  uint64_t allocated_at_start() const { return allocated_at_start_; }

  // Self time of event i (its duration minus the durations of the events directly inside it).
  int64_t self_ns(size_t i) const { return self_ns_[i]; }

  std::vector<OpStats> key_averages(const TableOptions& options = {}) const;
  // The table for a person: one row per name, sorted, with totals.
  std::string table(const TableOptions& options = {}) const;
  // The same rows as a JSON array of objects.
  std::string table_json(const TableOptions& options = {}) const;
  // The CPU peak: the most allocated bytes on the CPU and what was running then.
  MemoryPeak memory_peak(Device device = kCPU) const;

  // Writes the Chrome trace event format (JSON) that Perfetto and chrome://tracing open, with
  // torch.profiler's field names: "X" events with cat "cpu_op" / "user_annotation", args "Input Dims",
  // "Input type", "Sequence number"; "fwdbwd" flow arrows from a forward op to its backward; a "[memory]"
  // counter track of allocated and reserved bytes. Written to `path`.partial and renamed: `path` holds a
  // whole trace or is left as it was. Throws mantissa::Error naming the file when it cannot be written.
  void export_chrome_trace(const std::string& path, int rank = 0, int world_size = 1) const;

 private:
  std::vector<Event> events_;
  std::vector<int64_t> self_ns_;
  std::vector<MemorySample> memory_;
  int64_t duration_ns_ = 0;
  int64_t base_time_ns_ = 0;  // the session's start on the system clock (ns since the epoch)
  uint64_t allocated_at_start_ = 0;
};

}  // namespace mantissa::profiler
