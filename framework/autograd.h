// Define-by-run autograd: each differentiable op records a Node that holds, in named SavedTensor
// fields, exactly what its backward needs. The Engine walks the graph from the outputs with an explicit
// stack and dependency counts, accumulates into leaves, and frees saved tensors as it goes.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
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

// A tensor kept for backward, as a named field of its node. It holds the data without history (so an
// op saving its own output makes no cycle). After the engine releases it, get() throws the error a
// second backward through a freed graph deserves.
class SavedTensor {
 public:
  SavedTensor(Node* owner, const char* name);
  SavedTensor(const SavedTensor&) = delete;
  SavedTensor& operator=(const SavedTensor&) = delete;
  SavedTensor& operator=(const Tensor& t);
  const Tensor& get() const;
  bool defined() const { return value_.defined(); }
  void release();

 private:
  Node* owner_;
  const char* name_;
  Tensor value_;
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

 protected:
  uint64_t sequence_nr_;

 private:
  friend class SavedTensor;
  std::vector<SavedTensor*> saved_;
  bool released_ = false;
};

// The node at the end of a leaf's graph: adds the incoming gradient into leaf.grad, after the leaf's
// hooks and before its post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string_view name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

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

// Makes `output` the next output of `node`: sets grad_fn, output_nr and requires_grad.
void set_history(Tensor& output, const std::shared_ptr<Node>& node);

// Debug hook (amp::OverflowLocator): when set on this thread, called with every op output that records
// history, i.e. every differentiable op of a training forward, right after set_history. Empty removes it.
using ForwardObserver = std::function<void(const Tensor& output, const Node& node)>;
void set_forward_observer(ForwardObserver observer);
bool has_forward_observer();

// Runs backward from `roots` with `grads` (undefined entries allowed only for one-element roots).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, BackwardOptions options = {});

}  // namespace mantissa
