// The autograd engine: graph discovery and execution with explicit stacks (a 100,000-op chain needs no
// deep recursion, in backward or when the graph is destroyed), dependency counts, a ready queue ordered
// by sequence number, and gradient accumulation into leaves.
#include "framework/autograd.h"

#include <atomic>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "framework/autocast_state.h"
#include "framework/profiler/profiler.h"

namespace mantissa {
namespace {

std::atomic<uint64_t> g_next_sequence_nr{0};
thread_local bool t_grad_enabled = true;
thread_local AutocastTls t_autocast;
thread_local ForwardObserver t_forward_observer;

// True when `t` is the only handle to its data, so the engine may reuse it in place.
bool exclusively_owned(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous() && t.offset() == 0 &&
         !t.requires_grad();
}

// a + b, recorded under grad mode (a create_graph backward's sums); defined with the engine below.
Tensor add_grads_recorded(const Tensor& a, const Tensor& b);

// Returns a + b without changing either operand unless `a` is exclusively owned.
Tensor add_grads(Tensor a, const Tensor& b) {
  if (!exclusively_owned(a)) {
    Tensor c = empty(a.shape(), {.dtype = a.dtype(), .device = a.device()});
    copy_(c, a);
    a = c;
  }
  accumulate_(a, b);
  return a;
}

}  // namespace

// ---- SavedTensor ----

SavedTensor::SavedTensor(Node* owner, const char* name) : owner_(owner), name_(name) { owner->saved_.push_back(this); }

SavedTensor& SavedTensor::operator=(const Tensor& t) {
  released_ = false;
  is_output_ = false;
  saved_defined_ = t.defined();
  if (t.defined() && t.grad_fn().get() == owner_) {
    keep_as_output(t, t.output_nr());  // saved after set_history
  } else {
    value_ = t;  // an input (or a tensor without history): its history is upstream, no cycle
  }
  return *this;
}

void SavedTensor::keep_as_output(const Tensor& output, uint32_t output_nr) {
  value_ = output.detach();
  output_nr_ = output_nr;
  is_output_ = true;
}

const Tensor& SavedTensor::get() const {
  // A field that never held a tensor (saved only for some inputs) stays undefined after release.
  MT_CHECK(!released_ || !saved_defined_,
           "backward: trying to backward through the graph a second time: ", owner_->name(), "'s saved tensor '", name_,
           "' was already freed. HINT: pass {.retain_graph = true} to the first "
           "backward() or grad() if you need to walk the graph again");
  return value_;
}

void SavedTensor::release() {
  value_ = Tensor();
  released_ = true;
}

// ---- Node ----

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

uint64_t peek_sequence_nr() { return g_next_sequence_nr.load(std::memory_order_relaxed); }

Node::~Node() {
  // Destroying a long chain recursively would overflow the stack: detach the children we solely own
  // and destroy them here, iteratively, after taking their own children.
  std::vector<std::shared_ptr<Node>> stack;
  for (Edge& e : next_edges) {
    if (e.fn) stack.push_back(std::move(e.fn));
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {
      for (Edge& e : n->next_edges) {
        if (e.fn) stack.push_back(std::move(e.fn));
      }
    }
    // n goes out of scope here with no children left to recurse into.
  }
}

void Node::release_saved() {
  for (SavedTensor* s : saved_) s->release();
  released_ = true;
}

void Node::link_saved_outputs(const std::shared_ptr<Node>& self) {
  MT_ASSERT(self.get() == this, name(), ": link_saved_outputs with another node");
  for (SavedTensor* s : saved_) {
    if (!s->is_output_ || !s->value_.defined()) continue;
    // A fresh handle on the output's data whose history is this node.
    Tensor linked = make_view(s->value_, s->value_.shape(), s->value_.strides(), s->value_.offset());
    AutogradMeta& m = linked.impl()->meta();
    m.grad_fn = self;
    m.output_nr = s->output_nr_;
    m.requires_grad = true;
    s->value_ = std::move(linked);
  }
}

void Node::unlink_saved_outputs() {
  // Handles the apply() handed to new nodes keep their history; the field gets a history-free one.
  for (SavedTensor* s : saved_) {
    if (s->is_output_ && s->value_.defined()) s->value_ = s->value_.detach();
  }
}

bool Node::saved_have_history() const {
  for (const SavedTensor* s : saved_) {
    if (s->has_history()) return true;
  }
  return false;
}

// ---- AccumulateGrad ----

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  sequence_nr_ = std::numeric_limits<uint64_t>::max();  // run as soon as ready (DDP hooks rely on it)
  outputs.push_back({leaf_->shape, leaf_->dtype, leaf_->storage->device()});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor leaf(leaf_);
  Tensor g = std::move(grads[0]);
  AutogradMeta& m = leaf_->meta();
  for (const TensorHook& hook : m.hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = r;
  }
  // Under a create_graph backward (grad mode on) a gradient with history keeps it in leaf.grad, and a sum
  // into a grad with history is recorded, never done in place.
  const bool record = GradMode::is_enabled() && g.requires_grad();
  if (!m.grad) {
    // Take the incoming gradient when nobody else holds it; otherwise copy so that later in-place
    // accumulation cannot change another tensor.
    if (!record && !exclusively_owned(g)) {
      Tensor c = empty(g.shape(), {.dtype = g.dtype(), .device = g.device()});
      copy_(c, g);
      g = c;
    }
    m.grad = std::make_shared<Tensor>(std::move(g));
  } else if (record || m.grad->requires_grad()) {
    *m.grad = add_grads_recorded(*m.grad, g);
  } else {
    accumulate_(*m.grad, g);
  }
  for (const PostAccumulateHook& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

// ---- grad mode and graph wiring ----

AutocastTls& autocast_tls() { return t_autocast; }

bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool enabled) { t_grad_enabled = enabled; }

bool compute_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t && t->defined() && t->requires_grad()) return true;
  }
  return false;
}

bool compute_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.requires_grad()) return Edge{};
  AutogradMeta& m = t.impl()->meta();
  if (m.grad_fn) return Edge{m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

void set_history(Tensor& output, const std::shared_ptr<Node>& node) {
  AutogradMeta& m = output.impl()->meta();
  m.grad_fn = node;
  m.output_nr = static_cast<uint32_t>(node->outputs.size());
  m.requires_grad = true;
  node->outputs.push_back({output.shape(), output.dtype(), output.device()});
  // An op that saved its output before recording it: keep the data without the history that now points
  // back at the node.
  for (SavedTensor* s : node->saved_) {
    if (s->value_.is_same(output)) s->keep_as_output(output, m.output_nr);
  }
  if (t_forward_observer) t_forward_observer(output, *node);
}

void set_forward_observer(ForwardObserver observer) { t_forward_observer = std::move(observer); }
bool has_forward_observer() { return static_cast<bool>(t_forward_observer); }

// ---- the engine ----

namespace {

// Grad mode for the engine's scope: off while plain backward formulas run, on under create_graph.
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeScope() { GradMode::set_enabled(prev_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool prev_;
};

// Under create_graph two gradients meeting in one slot are summed with history (the ops layer's add sits
// above this layer): the sum's node hands its gradient to both terms.
struct GradSumBackward final : Node {
  std::string_view name() const override { return "GradSumBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0], g[0]}; }
};

Tensor add_grads_recorded(const Tensor& a, const Tensor& b) {
  if (!compute_requires_grad({&a, &b})) return add_grads(a, b);
  Tensor out = empty(a.shape(), {.dtype = a.dtype(), .device = a.device()});
  copy_(out, a);
  accumulate_(out, b);
  set_history(out, make_node<GradSumBackward>({&a, &b}));
  return out;
}

struct EngineOptions {
  const char* api;  // "backward" or "grad", for messages
  bool retain_graph = false;
  bool create_graph = false;
  // grad(): the inputs' gradient edges, whose gradients are handed back instead of accumulated. Null:
  // backward(), which runs every node reached and accumulates into leaves.
  const std::vector<Edge>* captures = nullptr;
};

// The one engine behind backward() and grad(). Returns the captured gradients (grad() mode), one per
// capture edge, undefined where none arrived.
std::vector<Tensor> execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                            const EngineOptions& options) {
  const char* api = options.api;
  MT_CHECK(roots.size() == grads.size(), api, ": got ", roots.size(), " outputs but ", grads.size(), " gradients");
  // Backward formulas run without recording, unless create_graph asks for their history; and in the
  // dtypes the forward chose (a hook may re-enter autocast).
  GradModeScope grad_mode(options.create_graph);
  AutocastSuspend no_autocast;

  std::vector<Edge> root_edges;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    MT_CHECK(r.defined(), api, ": output ", i, " is undefined");
    MT_CHECK(r.requires_grad(), api, ": output ", i, " (shape ", shape_str(r.shape()),
             ") does not require grad and has no grad_fn. HINT: did the forward run under NoGradGuard, or "
             "do none of its inputs require grad?");
    Tensor g = grads[i];
    if (!g.defined()) {
      MT_CHECK(r.numel() == 1, api,
               ": a gradient can be created implicitly only for one-element outputs; "
               "output ",
               i, " has shape ", shape_str(r.shape()), ". HINT: pass ",
               options.captures ? "{.grad_outputs = {...}}" : "backward(gradient)", " with a tensor of that shape");
      g = ones_like(r);
    } else {
      MT_CHECK(g.shape() == r.shape(), api, ": gradient shape ", shape_str(g.shape()), " does not match output shape ",
               shape_str(r.shape()));
      MT_CHECK(g.dtype() == r.dtype(), api, ": gradient dtype ", dtype_name(g.dtype()), " does not match output dtype ",
               dtype_name(r.dtype()));
    }
    root_edges.push_back(gradient_edge(r));
    root_grads.push_back(std::move(g));
  }

  // Discover the graph and count, for every node, the edges that point at it. grad() also finds the
  // nodes that hold an input's gradient edge, and the nodes that must run because a path leads from them
  // to one: every parent of such a node is itself needed, so dependency counts of the nodes that run are
  // only ever lowered by nodes that run. Other nodes get no gradient and never run.
  const bool capture = options.captures != nullptr;
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, std::vector<size_t>> captures_at;
  std::unordered_set<Node*> needed;
  std::vector<Tensor> captured;
  {
    std::unordered_set<Node*> seen;
    std::unordered_map<Node*, std::vector<Node*>> parents;  // grad() only
    std::vector<Node*> stack;
    for (const Edge& e : root_edges) {
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges) {
        if (!e.fn) continue;
        ++deps[e.fn.get()];
        if (capture) parents[e.fn.get()].push_back(n);
        if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
      }
    }
    if (capture) {
      captured.resize(options.captures->size());
      for (size_t i = 0; i < options.captures->size(); ++i) {
        Node* n = (*options.captures)[i].fn.get();
        if (!seen.contains(n)) continue;
        std::vector<size_t>& at = captures_at[n];
        if (at.empty()) stack.push_back(n);
        at.push_back(i);
      }
      while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        auto it = parents.find(n);
        if (it == parents.end()) continue;
        for (Node* p : it->second) {
          if (needed.insert(p).second) stack.push_back(p);
        }
      }
    }
  }
  auto wanted = [&](Node* n) { return !capture || needed.contains(n) || captures_at.contains(n); };

  struct Later {
    bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
      return a->sequence_nr() < b->sequence_nr();
    }
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, Later> ready;
  std::unordered_map<Node*, std::vector<Tensor>> buffers;

  auto deliver = [&](const Edge& e, Tensor g) {
    std::vector<Tensor>& buf = buffers[e.fn.get()];
    if (buf.empty()) buf.resize(e.fn->outputs.size());
    MT_ASSERT(e.input_nr < buf.size(), e.fn->name(), " got a gradient for output ", e.input_nr);
    if (!g.defined()) return;
    const Node::OutputInfo& info = e.fn->outputs[e.input_nr];
    MT_ASSERT(g.shape() == info.shape && g.dtype() == info.dtype, "gradient for ", e.fn->name(), " output ", e.input_nr,
              " is ", shape_str(g.shape()), " ", dtype_name(g.dtype()), ", expected ", shape_str(info.shape), " ",
              dtype_name(info.dtype));
    Tensor& slot = buf[e.input_nr];
    if (!slot.defined()) {
      slot = std::move(g);
    } else {
      slot = options.create_graph ? add_grads_recorded(slot, g) : add_grads(std::move(slot), g);
    }
  };

  for (size_t i = 0; i < root_edges.size(); ++i) {
    if (wanted(root_edges[i].fn.get())) deliver(root_edges[i], std::move(root_grads[i]));
  }
  for (const Edge& e : root_edges) {
    if (deps[e.fn.get()] == 0 && wanted(e.fn.get())) {
      deps[e.fn.get()] = -1;  // queued
      ready.push(e.fn);
    }
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    in.resize(node->outputs.size());

    const auto cap = capture ? captures_at.find(node.get()) : captures_at.end();
    const bool has_capture = cap != captures_at.end();
    bool any = false;
    for (const Tensor& g : in) any = any || g.defined();
    if (any) {
      // An input's gradient is taken where it arrived (not where a zero was filled in below), after
      // the hooks that backward() would run on it.
      std::vector<size_t> arrived;
      if (has_capture) {
        for (size_t i : cap->second) {
          if (in[(*options.captures)[i].input_nr].defined()) arrived.push_back(i);
        }
      }
      // Missing gradients of a multi-output node are zeros, so that apply() sees defined tensors (unless
      // the node asks for undefined ones).
      for (size_t k = 0; k < in.size() && node->materialize_grads(); ++k) {
        if (!in[k].defined()) {
          const Node::OutputInfo& info = node->outputs[k];
          in[k] = zeros(info.shape, {.dtype = info.dtype, .device = info.device});
        }
      }
      for (auto& [nr, hook] : node->pre_hooks) {
        if (!in[nr].defined()) continue;
        Tensor r = hook(in[nr]);
        if (r.defined()) in[nr] = r;
      }
      if (has_capture) {
        if (auto* acc = dynamic_cast<AccumulateGrad*>(node.get())) {
          for (const TensorHook& hook : acc->leaf()->meta().hooks) {
            Tensor r = hook(in[0]);
            if (r.defined()) in[0] = r;
          }
        }
        for (size_t i : arrived) captured[i] = in[(*options.captures)[i].input_nr];
      }
    }
    if (capture && !needed.contains(node.get())) continue;

    std::vector<Tensor> out;
    if (any) {
      if (options.create_graph && !node->supports_create_graph()) {
        bool history = node->saved_have_history();
        for (const Tensor& g : in) history = history || g.requires_grad();
        MT_CHECK(!history, node->name(),
                 " does not support create_graph yet: the gradient it computes could not be differentiated "
                 "again. HINT: compute this gradient without {.create_graph = true}, or keep this op out of the "
                 "graph between the outputs and the inputs that create_graph differentiates");
      }
      // The profiler's event for this node, linked to the forward op that recorded it by sequence number.
      profiler::RecordScope scope(node->name(), profiler::Category::kBackward,
                                  node->outputs.empty() ? kCPU : node->outputs[0].device);
      if (scope.active()) {
        scope.set_sequence_nr(node->sequence_nr());
        scope.add_inputs(in);
      }
      if (options.create_graph) {
        // Saved outputs unpack with this node as history for the call, and only for it (no cycle).
        struct Unlink {
          Node* n;
          ~Unlink() { n->unlink_saved_outputs(); }
        } unlink{node.get()};
        node->link_saved_outputs(node);
        out = node->apply(std::move(in));
      } else {
        out = node->apply(std::move(in));
      }
      if (!options.retain_graph) node->release_saved();
    }
    out.resize(node->next_edges.size());
    for (size_t k = 0; k < node->next_edges.size(); ++k) {
      const Edge& e = node->next_edges[k];
      if (!e.fn || !wanted(e.fn.get())) continue;
      deliver(e, std::move(out[k]));
      if (--deps[e.fn.get()] == 0) {
        deps[e.fn.get()] = -1;
        ready.push(e.fn);
      }
    }
  }
  return captured;
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, BackwardOptions options) {
  execute(roots, grads,
          {.api = "backward",
           .retain_graph = options.retain_graph || options.create_graph,
           .create_graph = options.create_graph});
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs, GradOptions options) {
  MT_CHECK(!outputs.empty(), "grad: no outputs given");
  MT_CHECK(!inputs.empty(), "grad: no inputs given. HINT: name the tensors whose gradients you want");
  std::vector<Tensor> grad_outputs = std::move(options.grad_outputs);
  if (grad_outputs.empty()) grad_outputs.resize(outputs.size());
  MT_CHECK(grad_outputs.size() == outputs.size(), "grad: got ", outputs.size(), " outputs but ", grad_outputs.size(),
           " grad_outputs");
  std::vector<Edge> captures;
  captures.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    MT_CHECK(x.defined(), "grad: input ", i, " is undefined");
    MT_CHECK(x.requires_grad(), "grad: input ", i, " (shape ", shape_str(x.shape()), ", ", dtype_name(x.dtype()),
             ") does not require grad, so it has no gradient. HINT: call set_requires_grad(true) on it before "
             "the forward that uses it");
    captures.push_back(gradient_edge(x));
  }
  std::vector<Tensor> result = execute(outputs, grad_outputs,
                                       {.api = "grad",
                                        .retain_graph = options.retain_graph.value_or(options.create_graph),
                                        .create_graph = options.create_graph,
                                        .captures = &captures});
  for (size_t i = 0; i < inputs.size(); ++i) {
    MT_CHECK(result[i].defined() || options.allow_unused, "grad: input ", i, " (shape ", shape_str(inputs[i].shape()),
             ") was not reached: no gradient flows to it from the outputs (it is not used to compute them, or "
             "only through detach() or a non-differentiable op). HINT: pass {.allow_unused = true} to get an "
             "undefined tensor for it");
  }
  return result;
}

}  // namespace mantissa
