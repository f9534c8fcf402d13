// Define-by-run autograd: each differentiable op records a Node that holds, in named SavedTensor
// fields, exactly what its backward needs. The Engine walks the graph from the outputs with an explicit
// stack and dependency counts, accumulates into leaves (backward) or hands the gradients of chosen tensors
// back (grad), and frees saved tensors as it goes. With create_graph the backward formulas themselves
// record history, so a gradient can be differentiated again (a gradient penalty).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace mantissa {

class Node;

// Where a gradient flows: input `input_nr` of node `fn`. An invalid edge means "no gradient needed".
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// A tensor kept for backward, as a named field of its node. Any other tensor is kept as it is (its
// history is upstream of the owner, so no cycle); the owner's own output is kept without history, with
// its output number, whether it is saved before or after set_history. For a create_graph apply the engine
// links the saved outputs to their node (get() then returns a handle whose history is the node) and
// unlinks them right after, so the node holds a reference to itself only during that call. After the
// engine releases it, get() throws the error a second backward through a freed graph deserves.
class SavedTensor {
 public:
  SavedTensor(Node* owner, const char* name);
  SavedTensor(const SavedTensor&) = delete;
  SavedTensor& operator=(const SavedTensor&) = delete;
  SavedTensor& operator=(const Tensor& t);
  // The saved tensor, with its history where it has one (a saved output: only while linked); undefined
  // when nothing was saved here.
  const Tensor& get() const;
  // Whether a defined tensor was saved; stays true after release, so that get() reports the freed graph.
  bool defined() const { return saved_defined_; }
  // Whether get() during a create_graph apply returns a tensor that requires grad.
  bool has_history() const { return is_output_ || (value_.defined() && value_.requires_grad()); }
  void release();

 private:
  friend class Node;
  friend void set_history(Tensor& output, const std::shared_ptr<Node>& node);
  void keep_as_output(const Tensor& output, uint32_t output_nr);

  Node* owner_;
  const char* name_;
  Tensor value_;  // a saved output: without history, except while linked
  uint32_t output_nr_ = 0;
  bool is_output_ = false;  // value_ is the owner's output `output_nr_`, kept without history
  bool saved_defined_ = false;
  bool released_ = false;
};

class Node {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string_view name() const = 0;
  // grads: one per forward output (undefined means zero). Returns one per next_edge (undefined = none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  // True when apply() under grad mode computes its results with differentiable ops (and unpacks saved
  // tensors with their history), so a create_graph backward gives gradients that can be differentiated
  // again. The engine refuses create_graph through a node that says false whenever the result would need
  // history, rather than return a gradient whose own gradient is silently wrong.
  virtual bool supports_create_graph() const { return false; }
  // Whether apply() gets zeros (true) or undefined tensors for outputs no gradient reached.
  virtual bool materialize_grads() const { return true; }

  // Topological tie-breaker: later nodes run first. Leaf accumulators run as soon as they are ready.
  uint64_t sequence_nr() const { return sequence_nr_; }

  struct OutputInfo {
    Shape shape;
    DType dtype;
    Device device;
  };
  std::vector<Edge> next_edges;     // one per differentiable forward input
  std::vector<OutputInfo> outputs;  // one per forward output
  // Hooks on a non-leaf output's gradient (Tensor::register_hook), run before apply().
  std::vector<std::pair<uint32_t, TensorHook>> pre_hooks;

  void release_saved();  // frees every SavedTensor field
  bool saved_released() const { return released_; }
  bool saved_have_history() const;  // some SavedTensor field would unpack with history
  // The engine's, around a create_graph apply: saved outputs unpack with `self` (this node) as history,
  // then no longer (a node must not keep a reference to itself).
  void link_saved_outputs(const std::shared_ptr<Node>& self);
  void unlink_saved_outputs();

 protected:
  uint64_t sequence_nr_;

 private:
  friend class SavedTensor;
  friend void set_history(Tensor& output, const std::shared_ptr<Node>& node);
  std::vector<SavedTensor*> saved_;
  bool released_ = false;
};

// The node at the end of a leaf's graph: adds the incoming gradient into leaf.grad, after the leaf's
// hooks and before its post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string_view name() const override { return "AccumulateGrad"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The sequence number the next Node will take (the profiler tags a forward op's event with it, so that the
// trace links the op to its node's backward).
uint64_t peek_sequence_nr();

// Grad mode: per thread, on by default. NoGradGuard turns it off for a scope and restores it.
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any of the defined inputs requires grad: the op must record a node.
bool compute_requires_grad(std::initializer_list<const Tensor*> inputs);
bool compute_requires_grad(const std::vector<Tensor>& inputs);

// The edge a gradient for `t` must flow into (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);

// Creates node N, wires its next_edges to `inputs` (in order) and returns it.
template <typename N, typename... Args>
std::shared_ptr<N> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(t && t->defined() ? gradient_edge(*t) : Edge{});
  return node;
}
template <typename N, typename... Args>
std::shared_ptr<N> make_node_from(const std::vector<Tensor>& inputs, Args&&... args) {
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  return node;
}

// Makes `output` the next output of `node`: sets grad_fn, output_nr and requires_grad. A SavedTensor of
// `node` that holds `output` is turned into a saved output (no reference cycle).
void set_history(Tensor& output, const std::shared_ptr<Node>& node);

// Debug hook (amp::OverflowLocator): when set on this thread, called with every op output that records
// history, i.e. every differentiable op of a training forward, right after set_history. Empty removes it.
using ForwardObserver = std::function<void(const Tensor& output, const Node& node)>;
void set_forward_observer(ForwardObserver observer);
bool has_forward_observer();

// Runs backward from `roots` with `grads` (undefined entries allowed only for one-element roots).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, BackwardOptions options = {});

struct GradOptions {
  // One per output (undefined entries allowed for one-element outputs); empty: ones for every output,
  // which must then all have one element.
  std::vector<Tensor> grad_outputs;
  // Keep saved tensors for another pass; unset means the value of create_graph, as in PyTorch (the graph
  // of a create_graph gradient reuses the forward's saved tensors).
  std::optional<bool> retain_graph;
  // Record the backward formulas, so the returned gradients have grad_fn and can be differentiated again.
  bool create_graph = false;
  // An input no gradient reaches gets an undefined tensor instead of an error.
  bool allow_unused = false;
};

// torch.autograd.grad: the gradients of `outputs` (weighted by grad_outputs) with respect to `inputs`, one
// per input, without touching any .grad. The same engine as backward(), in a mode that stops at the
// inputs' gradient edges: only nodes on a path to an input run, leaves' accumulators never do (so
// post-accumulate hooks, DDP's among them, stay silent), and a leaf input's own hooks see its gradient.
// Every input must require grad.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         GradOptions options = {});
inline std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs, GradOptions options = {}) {
  return grad(std::vector<Tensor>{output}, inputs, std::move(options));
}

}  // namespace mantissa
