#include "amp/precision_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/generator.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

namespace mantissa::amp {
namespace {

std::string name_of(DType d) { return std::string(dtype_name(d)); }

std::vector<std::string> dtypes_of(const std::vector<Tensor>& ts) {
  std::vector<std::string> out;
  for (const Tensor& t : ts) out.push_back(t.defined() ? name_of(t.dtype()) : "-");
  return out;
}

// One finished call of one module's forward in one run.
struct Call {
  std::string path;
  Module* module;
  int index;  // of this call among the module's calls in the run
  std::vector<std::string> in_dtypes, out_dtypes;
  std::vector<Tensor> outputs;  // detached
};

// The model's state that a report's runs would change, put back when it goes.
class ModelSnapshot {
 public:
  explicit ModelSnapshot(Module& model) : model_(model), generator_(default_generator().state()) {
    for (const NamedTensor& p : model.named_parameters()) grads_.emplace_back(p.tensor, p.tensor.grad());
    for (const NamedTensor& b : model.named_buffers()) buffers_.emplace_back(b.tensor, b.tensor.clone());
  }
  ~ModelSnapshot() {
    NoGradGuard no_grad;
    for (auto& [param, grad] : grads_) param.set_grad(grad);
    for (auto& [buffer, saved] : buffers_) copy_(buffer, saved);
    default_generator().set_state(generator_);
  }
  // Before each run: the same buffers and random stream, no gradients.
  void reset() {
    NoGradGuard no_grad;
    for (auto& [param, grad] : grads_) param.set_grad(Tensor());
    for (auto& [buffer, saved] : buffers_) copy_(buffer, saved);
    default_generator().set_state(generator_);
  }
  ModelSnapshot(const ModelSnapshot&) = delete;
  ModelSnapshot& operator=(const ModelSnapshot&) = delete;

 private:
  Module& model_;
  GeneratorState generator_;
  std::vector<std::pair<Tensor, Tensor>> grads_;
  std::vector<std::pair<Tensor, Tensor>> buffers_;
};

struct Run {
  std::vector<Call> calls;
  double loss = 0;
};

// Runs loss_fn with a forward hook on every module; with `activation_grads`, also hooks each module output
// that requires grad (once per tensor: a container's output that is its last child's is its child's) and
// runs the backward, collecting (name, grad) in the order the backward produces them.
Run run_once(Module& model, const std::function<Tensor()>& loss_fn, std::optional<DType> precision, Device device,
             std::vector<std::pair<std::string, Tensor>>* activation_grads) {
  Run run;
  std::map<Module*, int> calls_of;
  // Outputs already hooked, by identity. They are kept alive for the run: a freed output's address could
  // otherwise be reused by a later module's output, which would then be taken for the same tensor.
  std::set<const void*> hooked;
  std::vector<Tensor> hooked_alive;
  const void* loss_impl = nullptr;  // set once loss_fn has returned, before the backward
  std::vector<HookHandle> handles;
  for (const NamedModule& nm : model.named_modules()) {
    const std::string path = nm.name;
    handles.push_back(nm.module->register_forward_hook(
        [&, path](Module& m, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
          Call c{path, &m, calls_of[&m]++, dtypes_of(in), dtypes_of(out), {}};
          for (const Tensor& t : out) c.outputs.push_back(t.defined() ? t.detach() : Tensor());
          if (activation_grads != nullptr) {
            for (const Tensor& t : out) {
              if (!t.defined() || !t.requires_grad() || !hooked.insert(t.impl()).second) continue;
              hooked_alive.push_back(t);
              const std::string name = (path.empty() ? std::string("(model)") : path) + " output" +
                                       (c.index > 0 ? " #" + std::to_string(c.index) : "");
              // The loss itself is left out: its gradient is the scale, kept in fp32 by every recipe.
              t.register_hook([activation_grads, name, &loss_impl, impl = t.impl()](const Tensor& g) {
                if (impl != loss_impl) activation_grads->emplace_back(name, g.detach());
                return Tensor();
              });
            }
          }
          run.calls.push_back(std::move(c));
        }));
  }
  Tensor loss;
  {
    std::optional<AutocastGuard> guard;
    if (precision) guard.emplace(AutocastOptions{.device = device.type, .dtype = *precision});
    std::optional<NoGradGuard> no_grad;
    if (activation_grads == nullptr) no_grad.emplace();
    loss = loss_fn();
  }
  for (HookHandle& h : handles) h.remove();
  MT_CHECK(loss.defined() && loss.numel() == 1, "precision_report: the loss function must return the 0-d loss, got ",
           loss.defined() ? shape_str(loss.shape()) : std::string("an undefined tensor"));
  run.loss = loss.to(DType::kF64).item();
  loss_impl = loss.impl();
  if (activation_grads != nullptr) {
    MT_CHECK(loss.requires_grad(), "precision_report: the loss does not require grad, so there is no backward to ",
             "report on. HINT: call precision_report in grad mode, with parameters that require grad");
    loss.backward();
  }
  return run;
}

double max_abs(const Tensor& t) { return t.numel() == 0 ? 0.0 : max(abs(t.to(DType::kF64))).item(); }

void fill_differences(ModulePrecision& mp, const std::vector<Tensor>& out, const std::vector<Tensor>& base) {
  for (size_t i = 0; i < out.size() && i < base.size(); ++i) {
    const Tensor& a = out[i];
    const Tensor& b = base[i];
    if (!a.defined() || !b.defined() || !is_floating(a.dtype()) || a.shape() != b.shape()) continue;
    const double d = max_abs(sub(a.to(DType::kF64), b.to(DType::kF64)));
    const double scale = max_abs(b);
    mp.max_abs_diff = std::max(mp.max_abs_diff, d);
    mp.max_rel_diff = std::max(mp.max_rel_diff, scale > 0 ? d / scale : (d > 0 ? INFINITY : 0.0));
  }
}

RangeFractions output_range(const std::vector<Tensor>& outputs) {
  RangeFractions total;
  double above = 0, below_n = 0, below_s = 0, nonfinite = 0;
  for (const Tensor& t : outputs) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    const RangeFractions r = range_fractions(t);
    const auto n = static_cast<double>(r.numel);
    total.numel += r.numel;
    above += r.above_f16_max * n;
    below_n += r.below_f16_normal * n;
    below_s += r.below_f16_subnormal * n;
    nonfinite += r.nonfinite * n;
  }
  if (total.numel > 0) {
    const auto n = static_cast<double>(total.numel);
    total.above_f16_max = above / n;
    total.below_f16_normal = below_n / n;
    total.below_f16_subnormal = below_s / n;
    total.nonfinite = nonfinite / n;
  }
  return total;
}

std::string join(const std::vector<std::string>& v, const char* sep = ",") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s.empty() ? "-" : s;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string json_strings(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + json_string(v[i]);
  return s + "]";
}

std::string json_range(const RangeFractions& r) {
  return "{\"numel\": " + std::to_string(r.numel) + ", \"above_f16_max\": " + json_number(r.above_f16_max) +
         ", \"below_f16_normal\": " + json_number(r.below_f16_normal) +
         ", \"below_f16_subnormal\": " + json_number(r.below_f16_subnormal) +
         ", \"nonfinite\": " + json_number(r.nonfinite) + "}";
}

std::string json_underflow(const ScaledUnderflow& u) {
  return "{\"numel\": " + std::to_string(u.numel) + ", \"nonzero\": " + std::to_string(u.nonzero) +
         ", \"max_abs\": " + json_number(u.max_abs) + ", \"min_abs_nonzero\": " + json_number(u.min_abs_nonzero) +
         ", \"underflow\": " + json_number(u.underflow) + ", \"subnormal\": " + json_number(u.subnormal) +
         ", \"overflow\": " + json_number(u.overflow) + "}";
}

std::string percent(double f) {  // "0" for none, so that a nonzero fraction stands out
  if (f == 0) return "0";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.3g%%", 100 * f);
  return buf;
}

std::string sci(double v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

}  // namespace

PrecisionReport precision_report(Module& model, const std::function<Tensor()>& loss_fn,
                                 const PrecisionReportOptions& options) {
  MT_CHECK(static_cast<bool>(loss_fn), "precision_report: the loss function is empty");
  MT_CHECK(options.loss_scale > 0 && std::isfinite(options.loss_scale),
           "precision_report: loss_scale must be positive and finite, got ", options.loss_scale);
  for (const DType d : options.precisions) {
    MT_CHECK(is_low_precision(d) || d == DType::kF32,
             "precision_report: precisions are f16, bf16 or f32 (a second fp32 run), got ", dtype_name(d));
  }
  PrecisionReport report;
  report.loss_scale = options.loss_scale;
  std::vector<std::pair<std::string, Tensor>> activation_grads;
  std::vector<Run> runs;
  std::vector<std::pair<std::string, Tensor>> param_grads;
  {
    ModelSnapshot snapshot(model);
    snapshot.reset();
    runs.push_back(run_once(model, loss_fn, std::nullopt, options.device, &activation_grads));
    for (const NamedTensor& p : model.named_parameters()) {
      if (p.tensor.grad().defined()) param_grads.emplace_back(p.name, p.tensor.grad().detach().clone());
    }
    for (const DType d : options.precisions) {
      snapshot.reset();
      runs.push_back(
          run_once(model, loss_fn, d == DType::kF32 ? std::nullopt : std::optional<DType>(d), options.device, nullptr));
    }
  }  // the model's grads, buffers and generator are back as they were

  report.loss = runs[0].loss;
  report.losses.emplace_back("f32", runs[0].loss);
  for (size_t r = 1; r < runs.size(); ++r) report.losses.emplace_back(name_of(options.precisions[r - 1]), runs[r].loss);

  for (const Call& base : runs[0].calls) {
    ModuleRow row{base.path, base.module->type_name(), base.index, {}, {}};
    for (const NamedTensor& p : base.module->named_parameters()) {  // its own: names without a dot
      if (p.name.find('.') == std::string::npos) row.parameter_dtypes.push_back(name_of(p.tensor.dtype()));
    }
    ModulePrecision f32{"f32", base.in_dtypes, base.out_dtypes, 0, 0, output_range(base.outputs)};
    row.precisions.push_back(f32);
    for (size_t r = 1; r < runs.size(); ++r) {
      for (const Call& c : runs[r].calls) {
        if (c.module != base.module || c.index != base.index) continue;
        ModulePrecision mp{
            name_of(options.precisions[r - 1]), c.in_dtypes, c.out_dtypes, 0, 0, output_range(c.outputs)};
        fill_differences(mp, c.outputs, base.outputs);
        row.precisions.push_back(mp);
        break;
      }
    }
    report.modules.push_back(std::move(row));
  }

  auto add_gradient = [&](const std::string& name, const Tensor& g, bool activation) {
    GradientRow row{name, activation, scaled_underflow(g, 1.0), scaled_underflow(g, options.loss_scale)};
    report.max_abs_gradient = std::max(report.max_abs_gradient, row.unscaled.max_abs);
    report.unscaled.add(g);
    report.scaled.add(g, options.loss_scale);
    report.gradients.push_back(std::move(row));
  };
  for (const auto& [name, g] : param_grads) add_gradient(name, g, false);
  for (const auto& [name, g] : activation_grads) add_gradient(name, g, true);
  report.suggested_scale = suggested_loss_scale(report.max_abs_gradient);
  return report;
}

std::string PrecisionReport::table() const {
  std::ostringstream os;
  os << "Per module (outputs against the f32 baseline; the range columns are the f32 outputs' values that fp16 "
        "could not hold: above 65504, below its smallest normal 2^-14, below its smallest subnormal 2^-24)\n";
  auto path_of = [](const ModuleRow& m) {
    std::string path = m.path.empty() ? "(model)" : m.path;
    return m.call > 0 ? path + " #" + std::to_string(m.call) : path;
  };
  auto io_of = [](const ModulePrecision& mp) { return join(mp.input_dtypes) + ">" + join(mp.output_dtypes); };
  // Column widths from the contents, so that long paths (transformer.h.0.attn.resid_dropout) stay aligned.
  int path_w = 6, type_w = 5, io_w = 10;
  for (const ModuleRow& m : modules) {
    path_w = std::max(path_w, static_cast<int>(path_of(m).size()));
    type_w = std::max(type_w, static_cast<int>(m.type.size()));
    for (const ModulePrecision& mp : m.precisions) io_w = std::max(io_w, static_cast<int>(io_of(mp).size()));
  }
  char line[1024];
  std::snprintf(line, sizeof line, "%-*s %-*s %-8s", path_w, "module", type_w, "class", "params");
  os << line;
  const size_t n_prec = modules.empty() ? 0 : modules[0].precisions.size();
  for (size_t p = 0; p < n_prec; ++p) {
    const std::string name = modules[0].precisions[p].precision;
    std::snprintf(line, sizeof line, " %-*s", io_w, (name + " in>out").c_str());
    os << line;
    if (p > 0) {
      std::snprintf(line, sizeof line, " %9s %9s", (name + " abs").c_str(), "rel");
      os << line;
    }
  }
  os << "    >max   <normal  <subnorm\n";
  for (const ModuleRow& m : modules) {
    std::snprintf(line, sizeof line, "%-*s %-*s %-8s", path_w, path_of(m).c_str(), type_w, m.type.c_str(),
                  join(m.parameter_dtypes).substr(0, 8).c_str());
    os << line;
    for (size_t p = 0; p < m.precisions.size(); ++p) {
      const ModulePrecision& mp = m.precisions[p];
      std::snprintf(line, sizeof line, " %-*s", io_w, io_of(mp).c_str());
      os << line;
      if (p > 0) {
        std::snprintf(line, sizeof line, " %9.2e %9.2e", mp.max_abs_diff, mp.max_rel_diff);
        os << line;
      }
    }
    const RangeFractions& r = m.precisions[0].range;
    std::snprintf(line, sizeof line, " %7s %9s %9s\n", percent(r.above_f16_max).c_str(),
                  percent(r.below_f16_normal).c_str(), percent(r.below_f16_subnormal).c_str());
    os << line;
  }
  os << "\nLoss:";
  for (const auto& [p, l] : losses) os << " " << p << " " << json_number(l);
  os << "\n\nGradients of the f32 backward in fp16 (fractions of the nonzero elements), unscaled and at scale "
     << json_number(loss_scale) << "\n";
  int name_w = 8;
  for (const GradientRow& g : gradients) name_w = std::max(name_w, static_cast<int>(g.name.size()));
  std::snprintf(line, sizeof line, "%-*s %10s %10s %10s %10s %10s %10s\n", name_w, "gradient", "max|g|", "min|g|",
                "flushed", "subnormal", "flushed@S", "overflow@S");
  os << line;
  for (const GradientRow& g : gradients) {
    std::snprintf(line, sizeof line, "%-*s %10s %10s %10s %10s %10s %10s\n", name_w, g.name.c_str(),
                  sci(g.unscaled.max_abs).c_str(), sci(g.unscaled.min_abs_nonzero).c_str(),
                  percent(g.unscaled.underflow).c_str(), percent(g.unscaled.subnormal).c_str(),
                  percent(g.scaled.underflow).c_str(), percent(g.scaled.overflow).c_str());
    os << line;
  }
  os << "\nLargest gradient magnitude " << sci(max_abs_gradient) << "; the data suggests a loss scale of "
     << json_number(suggested_scale) << " (the largest power of two keeping it below 65504/2).\n";
  return os.str();
}

std::string PrecisionReport::json() const {
  std::ostringstream os;
  os << "{\"loss\": " << json_number(loss) << ", \"losses\": {";
  for (size_t i = 0; i < losses.size(); ++i)
    os << (i ? ", " : "") << json_string(losses[i].first) << ": " << json_number(losses[i].second);
  os << "}, \"loss_scale\": " << json_number(loss_scale) << ", \"max_abs_gradient\": " << json_number(max_abs_gradient)
     << ", \"suggested_scale\": " << json_number(suggested_scale) << ",\n \"modules\": [";
  for (size_t i = 0; i < modules.size(); ++i) {
    const ModuleRow& m = modules[i];
    os << (i ? ",\n  " : "\n  ") << "{\"path\": " << json_string(m.path) << ", \"class\": " << json_string(m.type)
       << ", \"call\": " << m.call << ", \"parameter_dtypes\": " << json_strings(m.parameter_dtypes)
       << ", \"precisions\": [";
    for (size_t p = 0; p < m.precisions.size(); ++p) {
      const ModulePrecision& mp = m.precisions[p];
      os << (p ? ", " : "") << "{\"precision\": " << json_string(mp.precision)
         << ", \"input_dtypes\": " << json_strings(mp.input_dtypes)
         << ", \"output_dtypes\": " << json_strings(mp.output_dtypes)
         << ", \"max_abs_diff\": " << json_number(mp.max_abs_diff)
         << ", \"max_rel_diff\": " << json_number(mp.max_rel_diff) << ", \"output_range\": " << json_range(mp.range)
         << "}";
    }
    os << "]}";
  }
  os << "],\n \"gradients\": [";
  for (size_t i = 0; i < gradients.size(); ++i) {
    const GradientRow& g = gradients[i];
    os << (i ? ",\n  " : "\n  ") << "{\"name\": " << json_string(g.name)
       << ", \"kind\": " << (g.activation ? "\"activation\"" : "\"parameter\"")
       << ", \"unscaled\": " << json_underflow(g.unscaled) << ", \"scaled\": " << json_underflow(g.scaled) << "}";
  }
  os << "],\n \"histogram\": {\"min_exponent\": " << Log2Histogram::kMinExponent << ", \"unscaled\": "
     << "[";
  for (size_t i = 0; i < unscaled.counts().size(); ++i) os << (i ? ", " : "") << unscaled.counts()[i];
  os << "], \"scaled\": [";
  for (size_t i = 0; i < scaled.counts().size(); ++i) os << (i ? ", " : "") << scaled.counts()[i];
  os << "], \"zeros\": " << unscaled.zeros() << ", \"nonfinite_scaled\": " << scaled.nonfinite() << "}}\n";
  return os.str();
}

std::string PrecisionReport::histogram_data() const {
  std::ostringstream os;
  for (int e = Log2Histogram::kMinExponent; e <= Log2Histogram::kMaxExponent; ++e) {
    os << e << " " << unscaled.count_at(e) << " " << scaled.count_at(e) << "\n";
  }
  return os.str();
}

void plot_gradient_histogram(const PrecisionReport& report, const std::string& png, const std::string& title) {
  namespace fs = std::filesystem;
  const fs::path out(png);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  MT_CHECK(fs::is_directory(dir), "plot_gradient_histogram: the folder of ", png, " does not exist");
  MT_CHECK(std::system("command -v gnuplot >/dev/null 2>&1") == 0,
           "plot_gradient_histogram: gnuplot not found. HINT: apt-get install gnuplot-nox (scripts/install-deps.sh)");
  const std::string stem = (dir / ("." + out.filename().string() + "." + std::to_string(::getpid()))).string();
  const std::string data = stem + ".dat", script = stem + ".gp", partial = stem + ".png";
  std::ofstream(data) << report.histogram_data();
  {
    std::ofstream gp(script);
    std::string safe_title;
    for (const char c : title) safe_title += (c == '"' || c == '\\') ? '\'' : c;
    // x: log2|g|. Shaded: fp16's subnormal range [2^-24, 2^-14) and normal range [2^-14, 65504]; lines at
    // fp16's flush-to-zero (2^-25) and overflow (65520 ~ 2^16) limits; bf16 covers the whole axis shown
    // down to 2^-126 (normal) and 2^-133 (subnormal), left of the plot: said in the key.
    gp << "set terminal pngcairo size 1100,560 noenhanced font 'sans,10'\n"
       << "set output '" << partial << "'\n"
       << "set title \"" << safe_title << "\"\n"
       << "set xlabel 'log2 |gradient|'\nset ylabel 'elements (log scale)'\nset logscale y\n"
       << "set xrange [-64:24]\nset yrange [0.8:*]\nset grid xtics\nset key top left box opaque\n"
       << "set object 1 rect from -24, graph 0 to -14, graph 1 fc rgb '#fff1d0' behind\n"
       << "set object 2 rect from -14, graph 0 to 15.999, graph 1 fc rgb '#e3f4df' behind\n"
       << "set arrow 1 from -25, graph 0 to -25, graph 1 nohead lc rgb '#c00000' dt 2 lw 2\n"
       << "set arrow 2 from 15.999, graph 0 to 15.999, graph 1 nohead lc rgb '#c00000' dt 2 lw 2\n"
       << "set label 1 'fp16 subnormal' at -23.5, graph 0.95\n"
       << "set label 2 'fp16 normal' at -13.5, graph 0.95\n"
       << "set label 3 'flush to 0' at -33, graph 0.88 tc rgb '#c00000'\n"
       << "set label 4 'inf' at 16.5, graph 0.88 tc rgb '#c00000'\n"
       << "set label 5 'bf16 and fp32: normal down to 2^-126, the whole axis' at -63, graph 0.80\n"
       << "plot '" << data << "' using 1:($2 > 0 ? $2 : 1/0) with steps lw 2 lc rgb '#1f4e9c' title 'unscaled', "
       << "'' using 1:($3 > 0 ? $3 : 1/0) with steps lw 2 lc rgb '#d0421b' title 'scaled by "
       << json_number(report.loss_scale) << "'\n";
  }
  const std::string cmd = "gnuplot '" + script + "' 2>'" + stem + ".err'";
  const int status = std::system(cmd.c_str());
  std::string err;
  {
    std::ifstream e(stem + ".err");
    std::getline(e, err);
  }
  std::error_code ec;
  fs::remove(data, ec);
  fs::remove(script, ec);
  fs::remove(stem + ".err", ec);
  if (status != 0 || !fs::exists(partial)) {
    fs::remove(partial, ec);
    MT_THROW("plot_gradient_histogram: gnuplot failed (", err.empty() ? "no message" : err, ")");
  }
  fs::rename(partial, out);  // whole or nothing at `png`
}

}  // namespace mantissa::amp
