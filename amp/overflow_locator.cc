// OverflowLocator: optionally a forward observer that checks every op output, then pre-hooks on every node
// of the graph; the first non-finite incoming gradient is blamed on the nodes that delivered it.
#include "amp/overflow_locator.h"

#include <cmath>
#include <cstdio>
#include <deque>
#include <set>
#include <vector>

#include "amp/fp8.h"
#include "framework/error.h"

namespace mantissa::amp {

struct OverflowLocator::Shared {
  std::map<const TensorImpl*, std::string> param_names;  // the model's parameters, by tensor
  bool forward_watching = false;
  std::map<const Node*, std::vector<const Node*>> consumers;  // who sends gradients to a node
  std::map<const Node*, std::string> module_of;
  std::map<const Node*, double> max_in;  // largest finite |grad| seen entering a node
  std::optional<OverflowFinding> finding;
  int64_t step = 0;
  // FP8: the context watched, and its per-role overflow counters when the step began.
  const Fp8Context* fp8 = nullptr;
  std::vector<int64_t> fp8_start;
  int64_t fp8_start_step = -1;
};

namespace {

std::string op_name(const Node* n) {
  std::string s(n->name());
  const std::string suffix = "Backward";
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  return s;
}

// "blocks.3.attn.qkv.weight" -> "blocks.3.attn.qkv"; "weight" -> "".
std::string module_path(const std::string& param) {
  const size_t dot = param.rfind('.');
  return dot == std::string::npos ? "" : param.substr(0, dot);
}

std::string common_prefix(const std::string& a, const std::string& b) {
  size_t i = 0, last_dot_end = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) {
    if (a[i] == '.') last_dot_end = i;
    ++i;
  }
  const bool whole = (i == a.size() || a[i] == '.') && (i == b.size() || b[i] == '.');
  return whole ? a.substr(0, i) : a.substr(0, last_dot_end);
}

// The largest finite |x| and whether x holds an inf ("inf") or a nan ("nan", which wins).
struct Scan {
  double max_abs = 0.0;
  std::string bad;
};
Scan scan(const Tensor& g) {
  Scan s;
  const Tensor d = g.to(DType::kF64).contiguous();
  const double* p = d.data<double>();
  for (int64_t i = 0; i < d.numel(); ++i) {
    if (std::isnan(p[i])) {
      s.bad = "nan";
    } else if (std::isinf(p[i])) {
      if (s.bad.empty()) s.bad = "inf";
    } else {
      s.max_abs = std::max(s.max_abs, std::abs(p[i]));
    }
  }
  return s;
}

// The module of node n: the common prefix of the modules of the nearest parameters below it (breadth
// first, bounded so that a huge graph stays affordable in debug mode).
std::string module_for(const Node* n, const std::map<const TensorImpl*, std::string>& param_names) {
  std::deque<std::pair<const Node*, int>> queue{{n, 0}};
  std::set<const Node*> visited{n};
  int found_depth = -1, budget = 256;
  std::optional<std::string> module;
  while (!queue.empty() && budget-- > 0) {
    auto [m, depth] = queue.front();
    queue.pop_front();
    if (found_depth >= 0 && depth > found_depth) break;
    if (const auto* acc = dynamic_cast<const AccumulateGrad*>(m)) {
      auto it = param_names.find(acc->leaf().get());
      if (it != param_names.end()) {
        const std::string path = module_path(it->second);
        module = module ? common_prefix(*module, path) : path;
        found_depth = depth;
      }
    }
    for (const Edge& e : m->next_edges)
      if (e.valid() && visited.insert(e.fn.get()).second) queue.push_back({e.fn.get(), depth + 1});
  }
  return module.value_or("");
}

std::string format_message(const OverflowFinding& f, const char* pass, const char* before_label) {
  char before[32];
  std::snprintf(before, sizeof(before), "%.1e", f.max_abs_before);
  return detail::cat("step ", f.step, ": ", pass, " of ", f.op, " in ", f.module.empty() ? "the root module" : f.module,
                     " produced ", f.value, " (", dtype_name(f.dtype), "; ", before_label, ": ", before, ")");
}

std::vector<int64_t> fp8_counts(const Fp8Context& context) {
  std::vector<int64_t> counts;
  for (const Fp8Context::TensorStats& st : context.stats()) counts.push_back(st.overflow);
  return counts;
}

}  // namespace

OverflowLocator::OverflowLocator(const Module& model) : shared_(std::make_shared<Shared>()) {
  for (const auto& [name, t] : model.named_parameters()) shared_->param_names[t.impl()] = name;
}

OverflowLocator::~OverflowLocator() {
  if (shared_->forward_watching) set_forward_observer(nullptr);
}

void OverflowLocator::begin_forward(int64_t step) {
  Shared& s = *shared_;
  s.finding.reset();
  s.step = step;
  s.forward_watching = true;
  if (s.fp8 != nullptr) {
    s.fp8_start = fp8_counts(*s.fp8);
    s.fp8_start_step = step;
  }
  set_forward_observer([weak = std::weak_ptr<Shared>(shared_)](const Tensor& out, const Node& node) {
    auto locked = weak.lock();
    if (!locked || locked->finding || !is_floating(out.dtype())) return;
    const Scan sc = scan(out);
    if (sc.bad.empty()) return;
    OverflowFinding f{.step = locked->step,
                      .op = op_name(&node),
                      .module = module_for(&node, locked->param_names),
                      .value = sc.bad,
                      .dtype = out.dtype(),
                      .max_abs_before = sc.max_abs};
    f.message = format_message(f, "forward", "max finite |x| there");
    locked->finding = f;
  });
}

const std::optional<OverflowFinding>& OverflowLocator::finding() const { return shared_->finding; }

void OverflowLocator::watch(const Tensor& root, int64_t step) {
  MT_CHECK(root.defined() && root.grad_fn() != nullptr, "OverflowLocator.watch: the root has no graph. HINT: ",
           "watch the (scaled) loss after the forward, before backward");
  Shared& s = *shared_;
  if (s.forward_watching) set_forward_observer(nullptr);
  // A finding of this step's forward comes first; otherwise start clean.
  std::optional<OverflowFinding> forward_finding =
      s.forward_watching && s.finding && s.finding->step == step ? s.finding : std::nullopt;
  std::map<const TensorImpl*, std::string> param_names = std::move(s.param_names);
  const Fp8Context* fp8 = s.fp8;
  std::vector<int64_t> fp8_start = std::move(s.fp8_start);
  const int64_t fp8_start_step = s.fp8_start_step;
  const bool forward_watched = s.forward_watching;
  s = Shared{};
  s.param_names = std::move(param_names);
  s.finding = std::move(forward_finding);
  s.step = step;
  // FP8 counters: from the start of this step's forward when begin_forward saw it, else from now.
  s.fp8 = fp8;
  if (fp8 != nullptr && !(forward_watched && fp8_start_step == step)) {
    fp8_start = fp8_counts(*fp8);
  }
  s.fp8_start = std::move(fp8_start);
  s.fp8_start_step = step;
  // The nodes, parents first (explicit stack), and who sends gradients to whom.
  std::vector<Node*> nodes;
  std::set<const Node*> seen{root.grad_fn().get()};
  std::vector<Node*> stack{root.grad_fn().get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      s.consumers[e.fn.get()].push_back(n);
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  for (Node* n : nodes) s.module_of[n] = module_for(n, s.param_names);
  // The check on each gradient entering each node.
  for (Node* n : nodes) {
    for (uint32_t k = 0; k < n->outputs.size(); ++k) {
      n->pre_hooks.push_back({k, [weak = std::weak_ptr<Shared>(shared_), n](const Tensor& g) -> Tensor {
                                auto locked = weak.lock();
                                if (!locked || !g.defined()) return Tensor();
                                Shared& sh = *locked;
                                const Scan sc = scan(g);
                                sh.max_in[n] = std::max(sh.max_in[n], sc.max_abs);
                                if (sc.bad.empty() || sh.finding) return Tensor();
                                OverflowFinding f{.step = sh.step, .value = sc.bad, .dtype = g.dtype()};
                                const auto& from = sh.consumers[n];
                                if (from.empty()) {  // the gradient handed to backward itself
                                  f.op = "the gradient given to backward";
                                  f.module = sh.module_of[n];
                                } else {
                                  for (const Node* c : from) {
                                    f.op += (f.op.empty() ? "" : " or ") + op_name(c);
                                    f.max_abs_before = std::max(f.max_abs_before, sh.max_in[c]);
                                  }
                                  f.module = sh.module_of[from.front()];
                                }
                                f.message = format_message(f, "backward", "max |x| before");
                                sh.finding = f;
                                return Tensor();
                              }});
    }
  }
}

void OverflowLocator::watch_fp8(const Fp8Context& context) {
  shared_->fp8 = &context;
  shared_->fp8_start = fp8_counts(context);
  shared_->fp8_start_step = shared_->step;
}

std::vector<Fp8OverflowFinding> OverflowLocator::fp8_findings() const {
  const Shared& s = *shared_;
  std::vector<Fp8OverflowFinding> out;
  if (s.fp8 == nullptr) return out;
  const std::vector<Fp8Context::TensorStats> stats = s.fp8->stats();
  MT_ASSERT(stats.size() == s.fp8_start.size(), "the FP8 context changed its linears while watched");
  for (size_t i = 0; i < stats.size(); ++i) {
    const Fp8Context::TensorStats& st = stats[i];
    if (st.overflow == s.fp8_start[i]) continue;
    const Fp8Overflow mode =
        st.role == "grad_output" ? s.fp8->recipe().backward_overflow : s.fp8->recipe().forward_overflow;
    Fp8OverflowFinding f{.step = s.step,
                         .module = module_path(st.name),
                         .param = st.name,
                         .role = st.role,
                         .dtype = st.dtype,
                         .overflow = mode,
                         .count = st.overflow - s.fp8_start[i],
                         .scale = st.scale};
    const double max = fp8_max(st.dtype);
    char scale[32], max_text[32];
    std::snprintf(scale, sizeof(scale), "%.1e", st.scale);
    std::snprintf(max_text, sizeof(max_text), "%g", max);
    const std::string became = mode == Fp8Overflow::kSaturate ? detail::cat("saturated to +-", max_text)
                               : st.dtype == DType::kF8E5M2   ? std::string("became inf")
                                                              : std::string("became nan");
    f.message =
        detail::cat("step ", f.step, ": FP8 cast of ", f.role, " in ", f.module.empty() ? "the root module" : f.module,
                    " (", f.param, ") overflowed ", st.dtype == DType::kF8E5M2 ? "E5M2" : "E4M3", " in ", f.count,
                    f.count == 1 ? " element (" : " elements (", became, "; scale now ", scale, ")");
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace mantissa::amp
