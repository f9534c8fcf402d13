// The profiler: torch.profiler's counterpart. While a Profiler session is running, every op the program runs
// (its kernel call through dispatch(), the GEMMs, the elementwise maps, the casts), every autograd node's
// backward, the optimizer and loss-scaler passes, collectives and the ranges a program opens itself are
// recorded on the thread that runs them, with their name, input shapes and dtypes, autocast state, device,
// start and duration; FLOPs for GEMMs and convolutions, bytes touched for the rest. The caching allocators
// report every allocation and free, so memory is a counter over time.
//
//   profiler::Profiler prof({.record_shapes = true});
//   prof.start();
//   { profiler::Range r("my_step"); ... }           // a range of your own (record_function)
//   profiler::Profile p = prof.stop();
//   std::cout << p.table({.sort_by = profiler::SortBy::kSelfTime, .row_limit = 20});
//   p.export_chrome_trace("trace.json");             // Perfetto (ui.perfetto.dev) or chrome://tracing
//
// Off (no session running), a recording site costs one relaxed atomic load and a branch. On, an event costs
// two clock reads and an append to a per-thread buffer (bench/profiler_bench.cc measures both). One session
// runs at a time per process.
//
// A forward op recorded at the top level (no op around it) carries the autograd sequence number its node
// takes; the node's backward event carries the same, so the trace links them (PyTorch's "Sequence number"
// and fwdbwd flow arrows).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "framework/device.h"

namespace mantissa {

class Tensor;

namespace profiler {

class Profile;
struct ThreadBuffer;

// What an event is, for the trace's "cat" and for grouping time by kind.
enum class Category : uint8_t {
  kOp,             // an op or its kernel (trace category "cpu_op")
  kBackward,       // an autograd node's apply() during backward
  kRange,          // a range a program opened (Range; trace "user_annotation")
  kPhase,          // a Trainer phase: data, forward, backward, unscale, optimizer, all_reduce, checkpoint, eval
  kCommunication,  // a collective (all-reduce, broadcast)
};
// The table's and JSON's name of a kind: "op", "backward", "range", "phase", "comm" (the trace uses
// torch.profiler's categories instead: "cpu_op", "user_annotation").
std::string_view category_name(Category c);

namespace detail {
extern std::atomic<bool> g_enabled;
}

// Whether a session is recording. The hot-path test every recording site makes first.
inline bool is_enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// Records one event from construction to destruction on this thread, when a session is running (otherwise
// it does nothing). A scope opened directly inside an op scope of the same name is not recorded again (an
// entry that opens "conv2d" with its FLOPs and then dispatches the "conv2d" kernel gives one event).
class RecordScope {
 public:
  explicit RecordScope(std::string_view name, Category category = Category::kOp, Device device = kCPU) {
    if (is_enabled()) begin(name, category, device);
  }
  ~RecordScope() {
    if (buffer_ != nullptr) end();
  }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

  bool active() const { return buffer_ != nullptr; }
  // An input: its shape and dtype (with ProfilerOptions::record_shapes) and its bytes. No-ops when inactive.
  void add_input(const Tensor& t);
  void add_inputs(const std::vector<Tensor>& ts);
  void add_flops(double flops);
  void add_bytes(double bytes);
  // The autograd node this event belongs to (the engine's, on a backward event).
  void set_sequence_nr(uint64_t sequence_nr);

 private:
  void begin(std::string_view name, Category category, Device device);
  void end();
  std::shared_ptr<ThreadBuffer> buffer_;  // keeps this session's buffer alive until end()
  size_t index_ = 0;
  uint64_t generation_ = 0;
};

// Runs `f()` as one event: record("forward", Category::kPhase, [&] { return model.forward(x); }).
template <typename F>
decltype(auto) record(std::string_view name, Category category, F&& f) {
  RecordScope scope(name, category);
  return std::forward<F>(f)();
}

// A range of the program's own around any code (torch.profiler.record_function).
class Range {
 public:
  explicit Range(std::string_view name) : scope_(name, Category::kRange) {}

 private:
  RecordScope scope_;
};

// The caching allocators' report of one allocation (bytes > 0) or free (bytes < 0), with their totals after
// it. Call only when is_enabled().
void record_memory(Device device, int64_t bytes, uint64_t allocated, uint64_t reserved);

struct ProfilerOptions {
  bool record_shapes = true;   // input shapes and dtypes per event (the trace's "Input Dims", "Input type")
  bool profile_memory = true;  // the allocators' live and reserved bytes over time
};

// A session. start() begins recording on every thread; stop() ends it and returns what was recorded. A
// session still running when the Profiler is destroyed is stopped and its events dropped.
class Profiler {
 public:
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Throws mantissa::Error when another session is running in this process.
  void start();
  // Events still open (a range around the stop() call) end at the stop time. Throws when not started.
  Profile stop();
  bool running() const { return running_; }

 private:
  ProfilerOptions options_;
  bool running_ = false;
};

}  // namespace profiler
}  // namespace mantissa
