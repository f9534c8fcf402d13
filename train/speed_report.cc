// --report=speed's analysis: a profile's events into time buckets, the precisions side by side, the verdict,
// the JSON and the picture.
#include "train/speed_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "framework/error.h"
#include "framework/profiler/json_text.h"

namespace mantissa {
namespace {

using profiler::Category;
using profiler::Event;

std::optional<TimeBucket> own_bucket(const Event& e) {
  const std::string_view n = e.name;
  switch (e.category) {
    case Category::kCommunication: return TimeBucket::kCommunication;
    case Category::kBackward: return TimeBucket::kElementwise;  // its own time: kernels it runs inline
    case Category::kRange: return std::nullopt;                 // what it runs is nested inside
    case Category::kPhase:
      if (n == "data") return TimeBucket::kLoader;
      if (n == "all_reduce" || n == "reduce_scatter" || n == "all_gather")
        return TimeBucket::kCommunication;  // DDP, ZeRO-1
      if (n == "unscale") return TimeBucket::kScaler;
      if (n == "optimizer") return TimeBucket::kOptimizer;
      if (n == "checkpoint" || n == "eval") return TimeBucket::kOther;
      return std::nullopt;  // forward, backward
    case Category::kOp: break;
  }
  // linear_act is its GEMM with the activation in the epilogue (its FLOPs are the GEMM's).
  if (n == "matmul" || n == "linear_act" || n == "conv2d" || n == "conv2d_backward" || n == "scaled_mm" ||
      n == "scaled_dot_product_attention" || n == "ScaledDotProductAttentionBackward") {
    return TimeBucket::kGemm;
  }
  if (n == "to") return TimeBucket::kCast;
  if (n.starts_with("GradScaler.") || n == "unscale_grads_" || n == "check_grads_finite_") return TimeBucket::kScaler;
  if (n.starts_with("Optimizer.step") || n.find("clip_grad_norm") != std::string_view::npos || n == "zero_grad") {
    return TimeBucket::kOptimizer;
  }
  return TimeBucket::kElementwise;  // copy_ and fill_ too (inside a cast or the optimizer, theirs)
}

// Buckets whose nested events stay theirs (a cast's copy_, the optimizer's kernels).
bool holds_its_children(TimeBucket b) { return b != TimeBucket::kElementwise && b != TimeBucket::kOther; }

// "[[1,16,32],[1,32,64]]" -> {{1,16,32},{1,32,64}}.
std::vector<std::vector<int64_t>> parse_dims(const std::string& s) {
  std::vector<std::vector<int64_t>> out;
  int depth = 0;
  std::string number;
  for (char c : s) {
    if (c == '[') {
      if (++depth == 2) out.emplace_back();
    } else if (c == ']' || c == ',') {
      if (!number.empty() && depth == 2) out.back().push_back(std::strtoll(number.c_str(), nullptr, 10));
      number.clear();
      if (c == ']') --depth;
    } else if ((c >= '0' && c <= '9') || c == '-') {
      number += c;
    }
  }
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string percent(double f) { return fixed(100 * f, 0) + "%"; }

std::string mib(uint64_t bytes) { return fixed(static_cast<double>(bytes) / (1 << 20), 1) + " MiB"; }

}  // namespace

std::string_view bucket_name(TimeBucket b) {
  switch (b) {
    case TimeBucket::kGemm: return "GEMM, attention, convolution";
    case TimeBucket::kElementwise: return "elementwise, copies, norms, losses";
    case TimeBucket::kCast: return "casts";
    case TimeBucket::kScaler: return "loss scaler";
    case TimeBucket::kOptimizer: return "optimizer";
    case TimeBucket::kLoader: return "loader";
    case TimeBucket::kCommunication: return "communication";
    case TimeBucket::kOther: return "other (phases' own, unrecorded)";
    case TimeBucket::kCount: break;
  }
  return "?";
}

double StepProfile::gemm_gflops_per_s() const {
  const double ms = bucket_ms[static_cast<int>(TimeBucket::kGemm)];
  return ms > 0 ? gemm_flops / (ms * 1e6) : 0;
}

StepProfile summarize_steps(const profiler::Profile& profile, std::string precision, int64_t steps, int64_t batch) {
  MT_CHECK(steps > 0, "summarize_steps: steps must be > 0, got ", steps);
  StepProfile r;
  r.precision = std::move(precision);
  r.steps = steps;
  r.batch = batch;
  r.step_ms = static_cast<double>(profile.duration_ns()) / 1e6 / static_cast<double>(steps);
  const std::vector<Event>& events = profile.events();
  // The training thread: the one that ran the forward phase (else the first).
  uint32_t main_thread = events.empty() ? 0 : events.front().thread;
  for (const Event& e : events) {
    if (e.category == Category::kPhase && e.name == "forward") {
      main_thread = e.thread;
      break;
    }
  }
  const double per_step = 1.0 / (1e6 * static_cast<double>(steps));  // ns in total -> ms per step
  std::vector<std::pair<int64_t, TimeBucket>> stack;                 // (end, bucket) of the open events
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, double> misaligned;
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> not_fp8_ready;
  int64_t top_level_ns = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.thread != main_thread) continue;
    while (!stack.empty() && stack.back().first <= e.start_ns) stack.pop_back();
    if (stack.empty()) top_level_ns += e.duration_ns();
    const std::optional<TimeBucket> parent =
        stack.empty() ? std::nullopt : std::optional<TimeBucket>(stack.back().second);
    TimeBucket b = TimeBucket::kOther;
    if (parent && holds_its_children(*parent)) {
      b = *parent;
    } else if (std::optional<TimeBucket> own = own_bucket(e)) {
      b = *own;
    } else if (parent) {
      b = *parent;
    }
    r.bucket_ms[static_cast<int>(b)] += static_cast<double>(profile.self_ns(i)) * per_step;
    stack.emplace_back(e.end_ns, b);
    if (e.category == Category::kOp && own_bucket(e) == TimeBucket::kGemm) {
      r.gemm_flops += e.flops / static_cast<double>(steps);
      if (e.name == "matmul") {
        const auto dims = parse_dims(e.input_dims);
        if (dims.size() >= 2 && dims[0].size() == 3 && dims[1].size() == 3) {
          const int64_t bt = std::max(dims[0][0], dims[1][0]), m = dims[0][1], k = dims[0][2], n = dims[1][2];
          if (m % 8 != 0 || n % 8 != 0 || k % 8 != 0) {
            misaligned[{bt, m, n, k}] += static_cast<double>(e.duration_ns()) * per_step;
          }
          if (m % 16 != 0 || n % 16 != 0 || k % 16 != 0) not_fp8_ready.insert({bt, m, n, k});
        }
      }
    }
  }
  r.bucket_ms[static_cast<int>(TimeBucket::kOther)] +=
      static_cast<double>(std::max<int64_t>(0, profile.duration_ns() - top_level_ns)) * per_step;
  for (const auto& [shape, ms] : misaligned) {
    const auto& [bt, m, n, k] = shape;
    r.misaligned.push_back({.batch = bt, .m = m, .n = n, .k = k, .ms_per_step = ms});
  }
  r.gemm_shapes_not_multiple_of_16 = static_cast<int64_t>(not_fp8_ready.size());
  std::sort(r.misaligned.begin(), r.misaligned.end(),
            [](const GemmShape& a, const GemmShape& b) { return a.ms_per_step > b.ms_per_step; });
  const profiler::MemoryPeak peak = profile.memory_peak();
  r.peak_bytes = peak.allocated;
  r.peak_stack = peak.stack;
  return r;
}

std::string speed_table(const std::vector<StepProfile>& rows) {
  std::ostringstream os;
  char line[256];
  auto row = [&](const std::string& label, auto&& cell) {
    std::snprintf(line, sizeof line, "%-40s", label.c_str());
    os << line;
    for (const StepProfile& r : rows) {
      std::snprintf(line, sizeof line, " %14s", cell(r).c_str());
      os << line;
    }
    os << "\n";
  };
  row("", [](const StepProfile& r) { return r.precision; });
  row("step time", [](const StepProfile& r) { return fixed(r.step_ms, 2) + " ms"; });
  row("samples/s", [](const StepProfile& r) { return fixed(r.samples_per_s(), 0); });
  const double ref = rows.empty() ? 0 : rows.front().step_ms;
  row("speed against " + (rows.empty() ? std::string() : rows.front().precision),
      [&](const StepProfile& r) { return fixed(ref / r.step_ms, 2) + "x"; });
  for (int b = 0; b < kTimeBuckets; ++b) {
    row("  " + std::string(bucket_name(static_cast<TimeBucket>(b))), [&](const StepProfile& r) {
      return fixed(r.bucket_ms[b], 2) + " " + percent(r.share(static_cast<TimeBucket>(b)));
    });
  }
  row("GEMM GFLOP/s", [](const StepProfile& r) { return fixed(r.gemm_gflops_per_s(), 1); });
  row("GEMM fraction of peak", [](const StepProfile& r) {
    return r.gemm_peak_gflops > 0 ? percent(r.gemm_gflops_per_s() / r.gemm_peak_gflops) : std::string("-");
  });
  row("GEMMs with a dim not a multiple of 8", [](const StepProfile& r) {
    double ms = 0;
    for (const GemmShape& g : r.misaligned) ms += g.ms_per_step;
    return std::to_string(r.misaligned.size()) + " (" + percent(r.step_ms > 0 ? ms / r.step_ms : 0) + ")";
  });
  row("GEMMs with a dim not a multiple of 16",
      [](const StepProfile& r) { return std::to_string(r.gemm_shapes_not_multiple_of_16); });
  row("peak memory (CPU)", [](const StepProfile& r) { return mib(r.peak_bytes); });
  row("inference p50 at batch 1", [](const StepProfile& r) { return fixed(r.infer_p50_ms, 2) + " ms"; });
  row("inference p99 at batch 1", [](const StepProfile& r) { return fixed(r.infer_p99_ms, 2) + " ms"; });
  row("inference samples/s at the batch", [](const StepProfile& r) { return fixed(r.infer_samples_per_s, 0); });
  return os.str();
}

std::string speed_verdict(const std::vector<StepProfile>& rows, bool cpu_has_bf16, bool cpu_has_fp16) {
  if (rows.size() < 2) return "";
  const StepProfile& ref = rows.front();
  std::ostringstream os;
  const double ref_gemm = ref.share(TimeBucket::kGemm);
  os << ref.precision << ": GEMMs, attention and convolutions are " << percent(ref_gemm) << " of the step";
  if (ref_gemm < 0.5) {
    os << ", so at most half of it can gain from 16-bit arithmetic; the rest is memory-bound work, where "
          "16-bit storage saves bytes only where tensors stay 16-bit";
  }
  os << ".\n";
  for (size_t i = 1; i < rows.size(); ++i) {
    const StepProfile& r = rows[i];
    const double speed = ref.step_ms / r.step_ms;
    os << r.precision << " is " << fixed(speed, 2) << "x " << ref.precision << (speed < 0.95 ? " (slower)" : "")
       << ": GEMMs take " << percent(r.share(TimeBucket::kGemm)) << " of its step, casts "
       << percent(r.share(TimeBucket::kCast)) << ", elementwise and normalization "
       << percent(r.share(TimeBucket::kElementwise)) << ", the optimizer " << percent(r.share(TimeBucket::kOptimizer));
    if (r.share(TimeBucket::kScaler) > 0.005) os << ", the loss scaler " << percent(r.share(TimeBucket::kScaler));
    os << ".";
    const double gemm_speed = ref.gemm_gflops_per_s() > 0 ? r.gemm_gflops_per_s() / ref.gemm_gflops_per_s() : 0;
    const bool native = r.precision == "bf16" ? cpu_has_bf16 : r.precision == "fp16" ? cpu_has_fp16 : true;
    if (gemm_speed > 0) {
      os << " Its GEMMs run at " << fixed(r.gemm_gflops_per_s(), 1) << " GFLOP/s, " << fixed(gemm_speed, 2) << "x "
         << ref.precision << "'s";
      if (!native) {
        os << ": this CPU has no " << (r.precision == "bf16" ? "AVX512_BF16 dot products" : "AVX512_FP16 arithmetic")
           << ": " << r.precision << " GEMMs widen their operands to f32, so at best they match f32";
      }
      os << ".";
    }
    if (r.share(TimeBucket::kCast) > 0.1) {
      os << " Casts cost " << percent(r.share(TimeBucket::kCast))
         << ": each forward converts weights and activations between f32 and " << r.precision
         << " (persistent working copies of the weights remove the weights' part).";
    }
    const double elementwise_ratio = ref.bucket_ms[static_cast<int>(TimeBucket::kElementwise)] > 0
                                         ? r.bucket_ms[static_cast<int>(TimeBucket::kElementwise)] /
                                               ref.bucket_ms[static_cast<int>(TimeBucket::kElementwise)]
                                         : 0;
    if (elementwise_ratio > 1.1) {
      os << " Its elementwise and normalization work takes " << fixed(elementwise_ratio, 2) << "x the " << ref.precision
         << " time: on the CPU each 16-bit element is converted to f32 and back.";
    }
    if (!r.misaligned.empty()) {
      const GemmShape& g = r.misaligned.front();
      os << " " << r.misaligned.size()
         << " GEMM shape(s) have a dim that is not a multiple of 8 (the slowest: " << g.batch << " x [" << g.m << " x "
         << g.k << "] @ [" << g.k << " x " << g.n << "], " << fixed(g.ms_per_step, 2) << " ms per step).";
    }
    os << "\n";
  }
  return os.str();
}

std::string speed_json(const std::vector<StepProfile>& rows, std::string_view model, std::string_view verdict) {
  std::ostringstream os;
  auto str = [](std::string_view s) { return profiler::json_string(s); };
  os << "{\"model\": " << str(model) << ", \"verdict\": " << str(verdict) << ", \"precisions\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepProfile& r = rows[i];
    os << (i ? ",\n  " : "\n  ") << "{\"precision\": " << str(r.precision) << ", \"steps\": " << r.steps
       << ", \"batch\": " << r.batch << ", \"step_ms\": " << fixed(r.step_ms, 4)
       << ", \"samples_per_s\": " << fixed(r.samples_per_s(), 2) << ", \"ms_per_step\": {";
    for (int b = 0; b < kTimeBuckets; ++b) {
      os << (b ? ", " : "") << str(bucket_name(static_cast<TimeBucket>(b))) << ": " << fixed(r.bucket_ms[b], 4);
    }
    os << "}, \"gemm_gflops_per_s\": " << fixed(r.gemm_gflops_per_s(), 3)
       << ", \"gemm_peak_gflops\": " << fixed(r.gemm_peak_gflops, 1)
       << ", \"gemm_shapes_not_multiple_of_16\": " << r.gemm_shapes_not_multiple_of_16 << ", \"misaligned_gemms\": [";
    for (size_t j = 0; j < r.misaligned.size(); ++j) {
      const GemmShape& g = r.misaligned[j];
      os << (j ? ", " : "") << "{\"batch\": " << g.batch << ", \"m\": " << g.m << ", \"n\": " << g.n
         << ", \"k\": " << g.k << ", \"ms_per_step\": " << fixed(g.ms_per_step, 4) << "}";
    }
    os << "], \"peak_bytes\": " << r.peak_bytes << ", \"inference_p50_ms\": " << fixed(r.infer_p50_ms, 4)
       << ", \"inference_p99_ms\": " << fixed(r.infer_p99_ms, 4)
       << ", \"inference_samples_per_s\": " << fixed(r.infer_samples_per_s, 2) << "}";
  }
  os << "\n]}\n";
  return os.str();
}

void plot_speed(const std::vector<StepProfile>& rows, std::string_view title, const std::string& png) {
  namespace fs = std::filesystem;
  MT_CHECK(std::system("command -v gnuplot >/dev/null 2>&1") == 0,
           "plot_speed: gnuplot not found. HINT: apt-get install gnuplot-nox (scripts/install-deps.sh)");
  const std::string stem = png + ".tmp", data = stem + ".dat", script = stem + ".gp", partial = png + ".partial";
  {
    std::ofstream d(data);
    for (const StepProfile& r : rows) {
      d << r.precision;
      for (int b = 0; b < kTimeBuckets; ++b) d << " " << fixed(r.bucket_ms[b], 4);
      d << "\n";
    }
    std::ofstream gp(script);
    // gnuplot's single-quoted strings double a quote to hold one.
    auto quoted = [](std::string_view s) {
      std::string out = "'";
      for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
      return out + "'";
    };
    gp << "set terminal pngcairo size 900,520 noenhanced font 'sans,10'\n"
       << "set output " << quoted(partial) << "\n"
       << "set title " << quoted(title) << "\n"
       << "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 border -1\n"
       << "set boxwidth 0.55\nset ylabel 'ms per training step'\nset yrange [0:*]\nset grid ytics\n"
       << "set key outside right top\n";
    const char* colors[] = {"#1f4e9c", "#7fa7d9", "#d0421b", "#f2a541", "#3c8d2f", "#8e6bb8", "#c7487a", "#9a9a9a"};
    gp << "plot ";
    for (int b = 0; b < kTimeBuckets; ++b) {
      gp << (b ? ", '' " : quoted(data) + " ") << "using " << b + 2 << (b == 0 ? ":xtic(1)" : "") << " title "
         << quoted(bucket_name(static_cast<TimeBucket>(b))) << " lc rgb '" << colors[b] << "'";
    }
    gp << "\n";
  }
  const int status = std::system(("gnuplot '" + script + "' 2>'" + stem + ".err'").c_str());
  std::string err;  // gnuplot's message: its last line that says something
  {
    std::ifstream e(stem + ".err");
    for (std::string line; std::getline(e, line);) {
      if (line.find_first_not_of(" \t^") != std::string::npos) err = line;
    }
  }
  std::error_code ec;
  fs::remove(data, ec);
  fs::remove(script, ec);
  fs::remove(stem + ".err", ec);
  if (status != 0 || !fs::exists(partial)) {
    fs::remove(partial, ec);
    MT_THROW("plot_speed: gnuplot could not write ", png, " (", err.empty() ? "no message" : err, ")");
  }
  fs::rename(partial, png);  // whole or nothing at `png`
}

}  // namespace mantissa
