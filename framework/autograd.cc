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
  value_ = t.defined() ? t.detach() : Tensor();
  released_ = false;
  return *this;
}

const Tensor& SavedTensor::get() const {
  MT_CHECK(!released_, "backward: trying to backward through the graph a second time: ", owner_->name(),
           "'s saved tensor '", name_,
           "' was already freed. HINT: pass {.retain_graph = true} to the first "
           "backward() if you need to walk the graph again");
  return value_;
}

void SavedTensor::release() {
  value_ = Tensor();
  released_ = true;
}

// ---- Node ----

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

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
  if (!m.grad) {
    // Take the incoming gradient when nobody else holds it; otherwise copy so that later in-place
    // accumulation cannot change another tensor.
    if (!exclusively_owned(g)) {
      Tensor c = empty(g.shape(), {.dtype = g.dtype(), .device = g.device()});
      copy_(c, g);
      g = c;
    }
    m.grad = std::make_shared<Tensor>(std::move(g));
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
  if (t_forward_observer) t_forward_observer(output, *node);
}

void set_forward_observer(ForwardObserver observer) { t_forward_observer = std::move(observer); }
bool has_forward_observer() { return static_cast<bool>(t_forward_observer); }

// ---- the engine ----

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, BackwardOptions options) {
  MT_CHECK(roots.size() == grads.size(), "backward: got ", roots.size(), " outputs but ", grads.size(), " gradients");
  NoGradGuard no_grad;          // backward formulas run without recording (no higher-order gradients)
  AutocastSuspend no_autocast;  // and in the dtypes the forward chose (a hook may re-enter autocast)

  std::vector<Edge> root_edges;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    MT_CHECK(r.defined(), "backward: output ", i, " is undefined");
    MT_CHECK(r.requires_grad(), "backward: output ", i, " (shape ", shape_str(r.shape()),
             ") does not require grad and has no grad_fn. HINT: did the forward run under NoGradGuard, or "
             "do none of its inputs require grad?");
    Tensor g = grads[i];
    if (!g.defined()) {
      MT_CHECK(r.numel() == 1,
               "backward: a gradient can be created implicitly only for one-element outputs; "
               "output ",
               i, " has shape ", shape_str(r.shape()),
               ". HINT: pass backward(gradient) with a "
               "tensor of that shape");
      g = ones_like(r);
    } else {
      MT_CHECK(g.shape() == r.shape(), "backward: gradient shape ", shape_str(g.shape()),
               " does not match output shape ", shape_str(r.shape()));
      MT_CHECK(g.dtype() == r.dtype(), "backward: gradient dtype ", dtype_name(g.dtype()),
               " does not match output dtype ", dtype_name(r.dtype()));
    }
    root_edges.push_back(gradient_edge(r));
    root_grads.push_back(std::move(g));
  }

  // Discover the graph and count, for every node, the edges that point at it.
  std::unordered_map<Node*, int> deps;
  {
    std::unordered_set<Node*> seen;
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
        if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
      }
    }
  }

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
    slot = slot.defined() ? add_grads(std::move(slot), g) : std::move(g);
  };

  for (size_t i = 0; i < root_edges.size(); ++i) deliver(root_edges[i], std::move(root_grads[i]));
  for (const Edge& e : root_edges) {
    if (deps[e.fn.get()] == 0) {
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

    bool any = false;
    for (const Tensor& g : in) any = any || g.defined();
    std::vector<Tensor> out;
    if (any) {
      // Missing gradients of a multi-output node are zeros, so every apply() sees defined tensors.
      for (size_t k = 0; k < in.size(); ++k) {
        if (!in[k].defined()) {
          const Node::OutputInfo& info = node->outputs[k];
          in[k] = zeros(info.shape, {.dtype = info.dtype, .device = info.device});
        }
      }
      for (auto& [nr, hook] : node->pre_hooks) {
        Tensor r = hook(in[nr]);
        if (r.defined()) in[nr] = r;
      }
      out = node->apply(std::move(in));
      if (!options.retain_graph) node->release_saved();
    }
    out.resize(node->next_edges.size());
    for (size_t k = 0; k < node->next_edges.size(); ++k) {
      const Edge& e = node->next_edges[k];
      if (!e.fn) continue;
      deliver(e, std::move(out[k]));
      if (--deps[e.fn.get()] == 0) {
        deps[e.fn.get()] = -1;
        ready.push(e.fn);
      }
    }
  }
}

}  // namespace mantissa
