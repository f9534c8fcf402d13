// The profiler's recorder: one buffer per thread per session, registered with the session when the thread
// first records; stop() collects them. Each buffer has its own mutex, taken by its thread for every event
// and by stop() once, so recording threads never wait on each other.
#include "framework/profiler/profiler.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "framework/allocator.h"
#include "framework/autocast_state.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/profiler/device_marks.h"
#include "framework/profiler/profile.h"
#include "framework/tensor.h"

namespace mantissa::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
}

struct ThreadBuffer {
  ~ThreadBuffer() {
    for (auto& [from, to] : marks) {
      detail::release_device_mark(from);
      detail::release_device_mark(to);
    }
  }
  std::mutex mu;
  uint64_t generation = 0;  // the session it records for; 0 once that session has stopped
  uint32_t thread = 0;
  std::vector<Event> events;
  std::vector<size_t> open;  // indices of the events not yet ended, outermost first
  std::vector<MemorySample> memory;
  // Per event (by index; shorter when the last events ran on the CPU): its CUDA marks, start and end.
  std::vector<std::pair<detail::DeviceMark*, detail::DeviceMark*>> marks;
};

namespace {

struct Session {
  std::mutex mu;
  uint64_t generation = 0;  // of the running session; 0 when none
  ProfilerOptions options;
  std::chrono::steady_clock::time_point start;
  int64_t base_time_ns = 0;
  uint64_t allocated_at_start = 0;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
};

Session& session() {
  static auto* s = new Session();  // leaked: threads may record while static objects are destroyed
  return *s;
}

std::atomic<uint64_t> g_generation{0};  // the running session's, read without the session's mutex
uint64_t g_last_generation = 0;
thread_local std::shared_ptr<ThreadBuffer> t_buffer;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - session().start)
      .count();
}

// This thread's buffer for the running session (a new one when the session changed), or null when no
// session is running.
std::shared_ptr<ThreadBuffer> buffer_for_this_thread() {
  const uint64_t gen = g_generation.load(std::memory_order_acquire);
  if (gen == 0) return nullptr;
  if (t_buffer != nullptr && t_buffer->generation == gen) return t_buffer;
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.generation != gen) return nullptr;
  auto b = std::make_shared<ThreadBuffer>();
  b->generation = gen;
  b->thread = static_cast<uint32_t>(s.buffers.size());
  b->events.reserve(4096);
  s.buffers.push_back(b);
  t_buffer = b;
  return b;
}

// PyTorch's names for the dtypes (its trace's "Input type"), so that tools written for its traces read ours.
std::string_view torch_type_name(DType d) {
  switch (d) {
    case DType::kF32: return "float";
    case DType::kF64: return "double";
    case DType::kF16: return "c10::Half";
    case DType::kBF16: return "c10::BFloat16";
    case DType::kI64: return "long int";
    case DType::kI32: return "int";
    case DType::kBool: return "bool";
    case DType::kU8: return "unsigned char";
    case DType::kF8E4M3: return "c10::Float8_e4m3fn";
    case DType::kF8E5M2: return "c10::Float8_e5m2";
  }
  return "unknown";
}

// Appends `item` to a JSON list kept without its closing bracket while the event is open.
void append_item(std::string& list, std::string_view item) {
  list += list.empty() ? "[" : ",";
  list += item;
}

}  // namespace

std::string_view category_name(Category c) {
  switch (c) {
    case Category::kOp: return "op";
    case Category::kBackward: return "backward";
    case Category::kRange: return "range";
    case Category::kPhase: return "phase";
    case Category::kCommunication: return "comm";
  }
  return "?";
}

void RecordScope::begin(std::string_view name, Category category, Device device) {
  std::shared_ptr<ThreadBuffer> b = buffer_for_this_thread();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mu);
  if (b->generation == 0) return;  // the session stopped meanwhile
  const Event* parent = b->open.empty() ? nullptr : &b->events[b->open.back()];
  if (parent != nullptr && parent->category == Category::kOp && category == Category::kOp && parent->name == name) {
    return;  // the kernel of an op scope of the same name: the op's event stands for both
  }
  if (device.is_cuda()) {
    b->marks.resize(b->events.size() + 1, {nullptr, nullptr});
    b->marks.back().first = detail::record_device_mark(device);
  }
  bool under_op = false;
  for (size_t i : b->open)
    under_op |= b->events[i].category == Category::kOp || b->events[i].category == Category::kBackward;
  Event& e = b->events.emplace_back();
  e.name.assign(name);
  e.category = category;
  e.device = device;
  e.thread = b->thread;
  e.depth = static_cast<uint32_t>(b->open.size());
  // A top-level forward op: the next node recorded on this thread is its own (PyTorch's "Sequence number").
  if (category == Category::kOp && !under_op && GradMode::is_enabled()) e.sequence_nr = peek_sequence_nr();
  const AutocastTls& ac = autocast_tls();
  const int dev = static_cast<int>(device.type);
  if (ac.enabled[dev]) e.autocast.assign(dtype_name(ac.dtype[dev]));
  index_ = b->events.size() - 1;
  b->open.push_back(index_);
  generation_ = b->generation;
  buffer_ = std::move(b);
  e.start_ns = now_ns();
}

void RecordScope::end() {
  const int64_t t = now_ns();
  ThreadBuffer& b = *buffer_;
  {
    std::lock_guard<std::mutex> lock(b.mu);
    if (b.generation == generation_) {
      Event& e = b.events[index_];
      e.end_ns = t;
      if (index_ < b.marks.size() && b.marks[index_].first != nullptr) {
        b.marks[index_].second = detail::record_device_mark(e.device);
      }
      if (!e.input_dims.empty()) e.input_dims += "]";
      if (!e.input_types.empty()) e.input_types += "]";
      // Scopes end in reverse order of their start on one thread; find it anyway, should one outlive another.
      auto it = std::find(b.open.rbegin(), b.open.rend(), index_);
      if (it != b.open.rend()) b.open.erase(std::next(it).base());
    }
  }
  buffer_.reset();
}

void RecordScope::add_input(const Tensor& t) {
  if (buffer_ == nullptr) return;
  std::lock_guard<std::mutex> lock(buffer_->mu);
  if (buffer_->generation != generation_) return;
  Event& e = buffer_->events[index_];
  if (!t.defined()) {
    if (session().options.record_shapes) {
      append_item(e.input_dims, "[]");
      append_item(e.input_types, "\"\"");
    }
    return;
  }
  e.bytes += static_cast<double>(t.numel()) * static_cast<double>(element_size(t.dtype()));
  if (!session().options.record_shapes) return;
  std::string dims = "[";
  for (size_t i = 0; i < t.shape().size(); ++i) {
    if (i > 0) dims += ",";
    dims += std::to_string(t.shape()[i]);
  }
  dims += "]";
  append_item(e.input_dims, dims);
  std::string type = "\"";
  type += torch_type_name(t.dtype());
  type += "\"";
  append_item(e.input_types, type);
}

void RecordScope::add_inputs(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) add_input(t);
}

void RecordScope::add_flops(double flops) {
  if (buffer_ == nullptr) return;
  std::lock_guard<std::mutex> lock(buffer_->mu);
  if (buffer_->generation == generation_) buffer_->events[index_].flops += flops;
}

void RecordScope::add_bytes(double bytes) {
  if (buffer_ == nullptr) return;
  std::lock_guard<std::mutex> lock(buffer_->mu);
  if (buffer_->generation == generation_) buffer_->events[index_].bytes += bytes;
}

void RecordScope::set_sequence_nr(uint64_t sequence_nr) {
  if (buffer_ == nullptr) return;
  std::lock_guard<std::mutex> lock(buffer_->mu);
  if (buffer_->generation == generation_) buffer_->events[index_].sequence_nr = sequence_nr;
}

void record_memory(Device device, int64_t bytes, uint64_t allocated, uint64_t reserved) {
  if (!session().options.profile_memory) return;
  std::shared_ptr<ThreadBuffer> b = buffer_for_this_thread();
  if (b == nullptr) return;
  const int64_t t = now_ns();
  std::lock_guard<std::mutex> lock(b->mu);
  if (b->generation == 0) return;
  b->memory.push_back({.time_ns = t,
                       .device = device,
                       .bytes = bytes,
                       .allocated = allocated,
                       .reserved = reserved,
                       .thread = b->thread});
}

Profiler::Profiler(ProfilerOptions options) : options_(options) {}

Profiler::~Profiler() {
  if (running_) {
    try {
      (void)stop();
    } catch (...) {  // a destructor does not throw; the events are dropped either way
    }
  }
}

void Profiler::start() {
  MT_CHECK(!running_, "profiler: start() on a session that is already running");
  Session& s = session();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    MT_CHECK(s.generation == 0,
             "profiler: another profiler session is running in this process; stop it first (one session at a time)");
    s.generation = ++g_last_generation;
    s.options = options_;
    s.buffers.clear();
    s.allocated_at_start = cpu_allocator_stats().allocated_bytes;
    s.base_time_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    s.start = std::chrono::steady_clock::now();
    g_generation.store(s.generation, std::memory_order_release);
  }
  running_ = true;
  detail::g_enabled.store(true, std::memory_order_release);
}

Profile Profiler::stop() {
  MT_CHECK(running_, "profiler: stop() without start()");
  detail::g_enabled.store(false, std::memory_order_release);
  running_ = false;
  Session& s = session();
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  int64_t duration = 0;
  uint64_t at_start = 0;
  int64_t base = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    duration = now_ns();
    g_generation.store(0, std::memory_order_release);
    s.generation = 0;
    buffers.swap(s.buffers);
    at_start = s.allocated_at_start;
    base = s.base_time_ns;
  }
  std::vector<Event> events;
  std::vector<MemorySample> memory;
  detail::DeviceMark* base_mark = nullptr;  // the device timeline's zero: the first start mark, at its host time
  int64_t base_ns = 0;
  for (const auto& b : buffers) {
    std::lock_guard<std::mutex> lock(b->mu);
    b->generation = 0;  // scopes still open end without writing
    for (size_t i = 0; i < b->marks.size(); ++i) {
      auto& [from, to] = b->marks[i];
      if (from == nullptr) continue;
      if (base_mark == nullptr) {
        base_mark = from;
        base_ns = b->events[i].start_ns;
      }
      if (to != nullptr) {
        b->events[i].device_ms = detail::device_elapsed_ms(from, to);
        b->events[i].device_start_ns = base_ns + static_cast<int64_t>(detail::device_elapsed_ms(base_mark, from) * 1e6);
      }
    }
    for (size_t i : b->open) b->events[i].end_ns = duration;
    for (size_t i : b->open) {
      Event& e = b->events[i];
      if (!e.input_dims.empty()) e.input_dims += "]";
      if (!e.input_types.empty()) e.input_types += "]";
    }
    std::move(b->events.begin(), b->events.end(), std::back_inserter(events));
    std::move(b->memory.begin(), b->memory.end(), std::back_inserter(memory));
    b->events.clear();
    b->memory.clear();
    b->open.clear();
  }
  // The marks go with their buffers (ThreadBuffer's destructor), after every elapsed time was read.
  return Profile(std::move(events), std::move(memory), duration, base, at_start);
}

}  // namespace mantissa::profiler
