// recompute: a node that keeps a segment's inputs and reruns the segment in its backward (ops/recompute/recompute.h).
#include "ops/recompute/recompute.h"

#include <memory>
#include <string>
#include <utility>

#include "framework/autocast_state.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/autocast.h"

namespace mantissa {
namespace {

// Each generator's state at the forward, to draw the same numbers again.
struct RandomState {
  Generator* generator;
  GeneratorState state;
};

// Puts every generator at the state it had at the forward while it lives, and back where it was after, so
// that the recomputation neither changes the stream the rest of the program sees nor depends on it.
class ReplayRandom {
 public:
  explicit ReplayRandom(const std::vector<RandomState>& at_forward) {
    for (const RandomState& r : at_forward) {
      now_.push_back({r.generator, r.generator->state()});
      r.generator->set_state(r.state);
    }
  }
  ~ReplayRandom() {
    for (const RandomState& r : now_) r.generator->set_state(r.state);
  }
  ReplayRandom(const ReplayRandom&) = delete;
  ReplayRandom& operator=(const ReplayRandom&) = delete;

 private:
  std::vector<RandomState> now_;
};

struct RecomputeBackward final : Node {
  RecomputeFn fn;
  std::vector<std::unique_ptr<SavedTensor>> inputs;  // the segment's inputs (data, no history)
  std::vector<bool> input_requires_grad;
  std::vector<size_t> recorded;  // the segment's outputs that have this node as grad_fn, in its output order
  size_t output_count = 0;       // all of the segment's outputs
  AutocastTls autocast;          // the forward's autocast state
  std::vector<RandomState> random;

  std::string_view name() const override { return "RecomputeBackward"; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    // The inputs become leaves of a graph of their own, so their gradients can be read after it.
    std::vector<Tensor> leaves;
    leaves.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor leaf = inputs[i]->defined() ? inputs[i]->get().detach() : Tensor();
      if (input_requires_grad[i]) leaf.set_requires_grad(true);
      leaves.push_back(std::move(leaf));
    }
    std::vector<Tensor> outputs;
    {
      // The engine runs backward formulas with grad mode and autocast off; the segment runs as it did.
      EnableGradGuard grad;
      ReplayRandom replay(random);
      amp::AutocastReplay as_forward(autocast);
      outputs = fn(leaves);
    }
    MT_CHECK(outputs.size() == output_count, "recompute: the segment returned ", outputs.size(),
             " outputs in the backward but ", output_count,
             " in the forward. HINT: the segment must do the same thing each time it runs");
    std::vector<Tensor> roots, root_grads;
    for (size_t k = 0; k < recorded.size(); ++k) {
      const Tensor& out = outputs[recorded[k]];
      if (!grads[k].defined() || !out.defined() || !out.requires_grad()) continue;
      MT_CHECK(out.shape() == grads[k].shape() && out.dtype() == grads[k].dtype(), "recompute: output ", recorded[k],
               " of the segment is ", dtype_name(out.dtype()), " ", shape_str(out.shape()), " in the backward but was ",
               dtype_name(grads[k].dtype()), " ", shape_str(grads[k].shape()),
               " in the forward. HINT: the segment must do the same thing each time it runs");
      roots.push_back(out);
      root_grads.push_back(grads[k]);
    }
    if (!roots.empty()) run_backward(roots, root_grads);
    std::vector<Tensor> result(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (input_requires_grad[i]) result[i] = leaves[i].grad();
    }
    return result;
  }
};

}  // namespace

std::vector<Tensor> recompute(const RecomputeFn& fn, const std::vector<Tensor>& inputs, RecomputeOptions options) {
  MT_CHECK(static_cast<bool>(fn), "recompute: no function given");
  if (!GradMode::is_enabled()) return fn(inputs);
  std::vector<RandomState> random{{&default_generator(), default_generator().state()}};
  for (Generator* g : options.generators) {
    MT_CHECK(g != nullptr, "recompute: a null generator in RecomputeOptions::generators");
    if (g != &default_generator()) random.push_back({g, g->state()});
  }
  const AutocastTls autocast = autocast_tls();
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;  // the point: no graph, so no activation is kept
    outputs = fn(inputs);
  }
  auto node = make_node_from<RecomputeBackward>(inputs);
  node->fn = fn;
  node->autocast = autocast;
  node->random = std::move(random);
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->inputs.push_back(std::make_unique<SavedTensor>(node.get(), "input"));
    if (inputs[i].defined()) *node->inputs.back() = inputs[i];
    node->input_requires_grad.push_back(inputs[i].defined() && inputs[i].requires_grad());
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    Tensor& out = outputs[j];
    if (!out.defined() || !is_floating(out.dtype())) continue;
    for (size_t i = 0; i < inputs.size(); ++i) {
      MT_CHECK(!inputs[i].defined() || out.impl() != inputs[i].impl(), "recompute: output ", j,
               " of the segment is its input ", i, ". HINT: return a copy (x.clone()) or leave it out of the segment");
    }
    set_history(out, node);
    node->recorded.push_back(j);
  }
  node->output_count = outputs.size();
  return outputs;
}

}  // namespace mantissa
