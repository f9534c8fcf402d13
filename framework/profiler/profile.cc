// A profile's views: self times from the nesting on each thread, the per-op table (key_averages), its
// JSON, and the memory peak with the events open at that moment.
#include "framework/profiler/profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "framework/profiler/json_text.h"

namespace mantissa::profiler {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Microseconds as a person reads them: 812us, 12.40ms, 3.210s.
std::string time_str(double us) {
  if (us < 1e3) return fixed(us, us < 10 ? 2 : 0) + "us";
  if (us < 1e6) return fixed(us / 1e3, 2) + "ms";
  return fixed(us / 1e6, 3) + "s";
}

}  // namespace

Profile::Profile(std::vector<Event> events, std::vector<MemorySample> memory, int64_t duration_ns, int64_t base_time_ns,
                 uint64_t allocated_at_start)
    : events_(std::move(events)),
      memory_(std::move(memory)),
      duration_ns_(duration_ns),
      base_time_ns_(base_time_ns),
      allocated_at_start_(allocated_at_start) {
  // Outer before inner: by thread, start, then the longer (an enclosing event that started in the same
  // nanosecond), then depth.
  std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    return std::tuple(a.thread, a.start_ns, -a.end_ns, a.depth) < std::tuple(b.thread, b.start_ns, -b.end_ns, b.depth);
  });
  std::stable_sort(memory_.begin(), memory_.end(),
                   [](const MemorySample& a, const MemorySample& b) { return a.time_ns < b.time_ns; });
  self_ns_.resize(events_.size());
  std::vector<size_t> stack;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    while (!stack.empty() && (events_[stack.back()].thread != e.thread || events_[stack.back()].end_ns <= e.start_ns)) {
      stack.pop_back();
    }
    self_ns_[i] = e.duration_ns();
    if (!stack.empty()) self_ns_[stack.back()] -= e.duration_ns();
    stack.push_back(i);
  }
}

std::vector<OpStats> Profile::key_averages(const TableOptions& options) const {
  std::map<std::tuple<std::string, Category, std::string>, OpStats> rows;
  std::vector<size_t> stack;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    while (!stack.empty() && (events_[stack.back()].thread != e.thread || events_[stack.back()].end_ns <= e.start_ns)) {
      stack.pop_back();
    }
    bool inside_same_name = false;
    for (size_t j : stack) inside_same_name |= events_[j].name == e.name && events_[j].category == e.category;
    stack.push_back(i);
    const std::string shape = options.group_by_shape ? e.input_dims : std::string();
    OpStats& r = rows[{e.name, e.category, shape}];
    r.name = e.name;
    r.category = e.category;
    r.input_dims = shape;
    ++r.calls;
    if (!inside_same_name) r.total_us += static_cast<double>(e.duration_ns()) / 1e3;
    r.self_us += static_cast<double>(self_ns_[i]) / 1e3;
    r.flops += e.flops;
    r.bytes += e.bytes;
    if (e.device_ms >= 0 && !inside_same_name) r.device_us += e.device_ms * 1e3;
  }
  std::vector<OpStats> out;
  out.reserve(rows.size());
  for (auto& [key, r] : rows) out.push_back(std::move(r));
  auto key = [&](const OpStats& r) -> double {
    switch (options.sort_by) {
      case SortBy::kSelfTime: return r.self_us;
      case SortBy::kTotalTime: return r.total_us;
      case SortBy::kCalls: return static_cast<double>(r.calls);
      case SortBy::kFlops: return r.flops;
      case SortBy::kName: return 0;
    }
    return 0;
  };
  std::stable_sort(out.begin(), out.end(), [&](const OpStats& a, const OpStats& b) {
    if (options.sort_by == SortBy::kName) return a.name < b.name;
    return key(a) > key(b);
  });
  return out;
}

std::string Profile::table(const TableOptions& options) const {
  const std::vector<OpStats> rows = key_averages(options);
  double self_sum = 0;
  for (const OpStats& r : rows) self_sum += r.self_us;
  const bool peak = options.peak_gflops > 0 || options.peak_gbytes_per_s > 0;
  bool device = false;  // a column of device time when some event ran on a GPU
  for (const OpStats& r : rows) device |= r.device_us > 0;
  size_t name_w = 4;
  const size_t shown = options.row_limit > 0 ? std::min<size_t>(rows.size(), options.row_limit) : rows.size();
  for (size_t i = 0; i < shown; ++i) name_w = std::max(name_w, std::min<size_t>(rows[i].name.size(), 48));
  std::ostringstream os;
  char line[4096];  // a row; its input dims (group_by_shape) may be long
  std::snprintf(line, sizeof line, "%-*s %-10s %8s %10s %8s %10s %10s %7s %9s %9s%s%s%s\n", static_cast<int>(name_w),
                "Name", "Kind", "Self %", "Self", "Total %", "Total", "Avg", "Calls", "GFLOP/s", "GB/s",
                peak ? "   %peak" : "", device ? "     Device" : "", options.group_by_shape ? "  Input dims" : "");
  os << line << std::string(std::string_view(line).size() - 1, '-') << "\n";
  const double wall = static_cast<double>(duration_ns_) / 1e3;
  for (size_t i = 0; i < shown; ++i) {
    const OpStats& r = rows[i];
    std::string pk;
    if (peak) {
      // A row with FLOPs is measured against the arithmetic peak, the rest against memory bandwidth.
      const double frac =
          r.flops > 0
              ? (options.peak_gflops > 0 ? r.gflops_per_s() / options.peak_gflops : -1)
              : (options.peak_gbytes_per_s > 0 && r.bytes > 0 ? r.gbytes_per_s() / options.peak_gbytes_per_s : -1);
      pk = frac >= 0 ? fixed(100 * frac, 1) + "%" : "-";
    }
    const std::string name = r.name.size() > 48 ? r.name.substr(0, 45) + "..." : r.name;
    std::string tail;
    if (peak) tail += "  " + std::string(7 - std::min<size_t>(7, pk.size()), ' ') + pk;
    if (device) {
      const std::string d = r.device_us > 0 ? time_str(r.device_us) : std::string("-");
      tail += " " + std::string(10 - std::min<size_t>(10, d.size()), ' ') + d;
    }
    if (options.group_by_shape) tail += "  " + r.input_dims;
    std::snprintf(line, sizeof line, "%-*s %-10s %7.1f%% %10s %7.1f%% %10s %10s %7lld %9s %9s%s\n",
                  static_cast<int>(name_w), name.c_str(), std::string(category_name(r.category)).c_str(),
                  wall > 0 ? 100 * r.self_us / wall : 0.0, time_str(r.self_us).c_str(),
                  wall > 0 ? 100 * r.total_us / wall : 0.0, time_str(r.total_us).c_str(),
                  time_str(r.total_us / static_cast<double>(r.calls)).c_str(), static_cast<long long>(r.calls),
                  r.flops > 0 ? fixed(r.gflops_per_s(), 1).c_str() : "-",
                  r.bytes > 0 ? fixed(r.gbytes_per_s(), 2).c_str() : "-", tail.c_str());
    os << line;
  }
  if (shown < rows.size()) os << "... " << rows.size() - shown << " more rows\n";
  os << "Profiled wall time: " << time_str(wall)
     << "; time in recorded events (self, all threads): " << time_str(self_sum) << "\n";
  return os.str();
}

std::string Profile::table_json(const TableOptions& options) const {
  std::ostringstream os;
  os << "[";
  bool first = true;
  for (const OpStats& r : key_averages(options)) {
    os << (first ? "\n" : ",\n") << "  {\"name\": " << json_string(r.name)
       << ", \"kind\": " << json_string(category_name(r.category)) << ", \"calls\": " << r.calls
       << ", \"self_us\": " << fixed(r.self_us, 3) << ", \"total_us\": " << fixed(r.total_us, 3)
       << ", \"flops\": " << fixed(r.flops, 0) << ", \"bytes\": " << fixed(r.bytes, 0)
       << ", \"gflops_per_s\": " << fixed(r.gflops_per_s(), 3) << ", \"gbytes_per_s\": " << fixed(r.gbytes_per_s(), 3)
       << ", \"device_us\": " << fixed(r.device_us, 3);
    if (options.group_by_shape) os << ", \"input_dims\": " << (r.input_dims.empty() ? "null" : r.input_dims);
    os << "}";
    first = false;
  }
  os << "\n]\n";
  return os.str();
}

MemoryPeak Profile::memory_peak(Device device) const {
  MemoryPeak peak;
  peak.allocated = device.is_cpu() ? allocated_at_start_ : 0;
  const MemorySample* at = nullptr;
  for (const MemorySample& m : memory_) {
    if (m.device == device && m.allocated > peak.allocated) {
      peak.allocated = m.allocated;
      at = &m;
    }
  }
  if (at == nullptr) return peak;
  peak.time_ns = at->time_ns;
  for (const Event& e : events_) {
    if (e.thread == at->thread && e.start_ns <= at->time_ns && at->time_ns <= e.end_ns) peak.stack.push_back(e.name);
  }
  return peak;
}

}  // namespace mantissa::profiler
