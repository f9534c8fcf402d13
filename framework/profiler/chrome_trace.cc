// The Chrome trace event format (the JSON that Perfetto, chrome://tracing and tools built for
// torch.profiler's traces read), written whole or not at all.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <unistd.h>

#include "framework/error.h"
#include "framework/profiler/json_text.h"
#include "framework/profiler/profile.h"

namespace mantissa::profiler {
namespace {

// Microseconds with nanosecond digits, as the format counts time.
std::string us(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  return buf;
}

// The trace's "cat": torch.profiler's names where it has the kind.
std::string_view trace_category(Category c) {
  switch (c) {
    case Category::kOp:
    case Category::kBackward:
    case Category::kCommunication: return "cpu_op";
    case Category::kRange:
    case Category::kPhase: return "user_annotation";
  }
  return "cpu_op";
}

}  // namespace

void Profile::export_chrome_trace(const std::string& path, int rank, int world_size) const {
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "w");
  MT_CHECK(f != nullptr, "profiler: cannot write the trace ", path, ": ", std::strerror(errno));
  const long long pid = static_cast<long long>(::getpid());
  std::string buf;
  buf.reserve(1 << 20);
  bool ok = true;
  auto flush = [&](bool force) {
    if (!ok || (!force && buf.size() < (1 << 20))) return;
    ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
    buf.clear();
  };
  bool first = true;
  auto event = [&](const std::string& json) {
    buf += first ? "\n  " : ",\n  ";
    buf += json;
    first = false;
    flush(false);
  };
  buf += "{\n\"schemaVersion\": 1,\n\"deviceProperties\": [],\n";
  buf += "\"distributedInfo\": {\"backend\": \"mantissa\", \"rank\": " + std::to_string(rank) +
         ", \"world_size\": " + std::to_string(world_size) + "},\n";
  buf += "\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": " + std::to_string(base_time_ns_) + ",\n";
  buf += "\"traceEvents\": [";
  event("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(pid) +
        ", \"tid\": 0, \"args\": {\"name\": \"mantissa rank " + std::to_string(rank) + "\"}}");
  std::map<uint32_t, bool> threads;
  for (const Event& e : events_) threads[e.thread] = true;
  for (const auto& [t, unused] : threads) {
    event("{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + std::to_string(pid) +
          ", \"tid\": " + std::to_string(t) + ", \"args\": {\"name\": \"thread " + std::to_string(t) + "\"}}");
  }
  // The forward op of each sequence number, for the fwdbwd arrows.
  std::map<uint64_t, const Event*> forward_of;
  for (const Event& e : events_) {
    if (e.category == Category::kOp && e.sequence_nr != kNoSequenceNr) forward_of.emplace(e.sequence_nr, &e);
  }
  uint64_t external_id = 0;
  for (const Event& e : events_) {
    std::string j =
        "{\"ph\": \"X\", \"cat\": " + json_string(trace_category(e.category)) + ", \"name\": " + json_string(e.name) +
        ", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(e.thread) + ", \"ts\": " + us(e.start_ns) +
        ", \"dur\": " + us(e.duration_ns()) + ", \"args\": {\"External id\": " + std::to_string(++external_id);
    j += ", \"kind\": " + json_string(category_name(e.category));
    j += ", \"device\": " + json_string(e.device.str());
    if (e.sequence_nr != kNoSequenceNr) j += ", \"Sequence number\": " + std::to_string(e.sequence_nr);
    if (e.category == Category::kBackward) j += ", \"Fwd thread id\": 0";
    if (!e.input_dims.empty()) j += ", \"Input Dims\": " + e.input_dims;
    if (!e.input_types.empty()) j += ", \"Input type\": " + e.input_types;
    if (!e.autocast.empty()) j += ", \"autocast\": " + json_string(e.autocast);
    if (e.flops > 0) j += ", \"flops\": " + std::to_string(static_cast<long long>(e.flops));
    if (e.bytes > 0) j += ", \"bytes\": " + std::to_string(static_cast<long long>(e.bytes));
    j += "}}";
    event(j);
    if (e.device_ms >= 0) {  // the device's time of it, on a track per device (torch.profiler's "kernel")
      event("{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": " + json_string(e.name) +
            ", \"pid\": " + json_string(e.device.str()) + ", \"tid\": \"stream\", \"ts\": " + us(e.device_start_ns) +
            ", \"dur\": " + us(static_cast<int64_t>(e.device_ms * 1e6)) +
            ", \"args\": {\"External id\": " + std::to_string(external_id) + "}}");
    }
    if (e.category == Category::kBackward && e.sequence_nr != kNoSequenceNr) {
      auto it = forward_of.find(e.sequence_nr);
      if (it != forward_of.end()) {
        const Event& fwd = *it->second;
        const std::string id = std::to_string(e.sequence_nr);
        event("{\"ph\": \"s\", \"id\": " + id + ", \"pid\": " + std::to_string(pid) +
              ", \"tid\": " + std::to_string(fwd.thread) + ", \"ts\": " + us(fwd.start_ns) +
              ", \"cat\": \"fwdbwd\", \"name\": \"fwdbwd\"}");
        event("{\"ph\": \"f\", \"id\": " + id + ", \"pid\": " + std::to_string(pid) +
              ", \"tid\": " + std::to_string(e.thread) + ", \"ts\": " + us(e.start_ns) +
              ", \"cat\": \"fwdbwd\", \"name\": \"fwdbwd\", \"bp\": \"e\"}");
      }
    }
  }
  for (const MemorySample& m : memory_) {
    event("{\"ph\": \"C\", \"name\": \"[memory] " + m.device.str() + "\", \"pid\": " + std::to_string(pid) +
          ", \"tid\": 0, \"ts\": " + us(m.time_ns) + ", \"args\": {\"Total Allocated\": " +
          std::to_string(m.allocated) + ", \"Total Reserved\": " + std::to_string(m.reserved) + "}}");
  }
  buf += "\n]\n}\n";
  flush(true);
  ok = std::fflush(f) == 0 && ok;
  const int write_errno = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(partial.c_str());
    MT_THROW("profiler: writing the trace ", path, " failed: ", std::strerror(write_errno ? write_errno : errno),
             "; no trace was left behind");
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(partial.c_str());
    MT_THROW("profiler: cannot write the trace ", path, ": ", std::strerror(e));
  }
}

}  // namespace mantissa::profiler
