// Module hooks: the handle, the hooked call (forward pre-hooks, forward, forward hooks; call() in module.h
// runs it around any module's forward) and the backward hooks, which work as PyTorch's BackwardHook does:
// two identity nodes, one in front of the call's inputs and one behind its outputs. The output node sees the gradients
// of the outputs first (it runs the backward pre-hooks and keeps the grad_outputs); the input node runs once every
// gradient inside the module has reached the inputs, and calls the full backward hooks with both.
#include <string>
#include <utility>

#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/module.h"

namespace mantissa {

void detail::ModuleHooks::remove(uint64_t id) {
  const auto erase = [id](auto& list) { std::erase_if(list, [id](const auto& e) { return e.id == id; }); };
  erase(forward_pre);
  erase(forward);
  erase(backward_pre);
  erase(backward);
}

void HookHandle::remove() {
  if (auto hooks = hooks_.lock()) hooks->remove(id_);
  hooks_.reset();
}

namespace {

// The module whose hooks call() is running around its forward on this thread (detail::HookedForwardScope).
thread_local const Module* g_hooked_forward = nullptr;

template <typename Fn>
std::vector<std::shared_ptr<const Fn>> snapshot(const std::vector<detail::ModuleHooks::Entry<Fn>>& list) {
  std::vector<std::shared_ptr<const Fn>> out;
  out.reserve(list.size());
  for (const auto& e : list) out.push_back(e.fn);
  return out;
}

// A forward hook's replacement: one tensor per entry, and none left undefined that was defined.
void check_forward_replacement(const Module& m, const std::vector<Tensor>& replacement,
                               const std::vector<Tensor>& original, const char* hook, const char* what) {
  MT_CHECK(replacement.size() == original.size(), m.type_name(), ": a ", hook, " returned ", replacement.size(), " ",
           what, " for the ", original.size(),
           " it was given. HINT: return one tensor per entry, in order (std::nullopt keeps them all)");
  for (size_t i = 0; i < original.size(); ++i) {
    MT_CHECK(replacement[i].defined() || !original[i].defined(), m.type_name(), ": a ", hook,
             " returned an undefined tensor for ", what, " ", i,
             ", which was defined. HINT: return the tensor it was given to keep it");
  }
}

// What one hooked call leaves for its backward, shared by its two nodes.
struct BackwardHookCall {
  Module* module = nullptr;
  std::vector<std::shared_ptr<const FullBackwardPreHook>> pre_hooks;
  std::vector<std::shared_ptr<const FullBackwardHook>> hooks;
  size_t n_inputs = 0, n_outputs = 0;
  std::vector<size_t> input_index;   // the inputs routed through the input node, by position
  std::vector<size_t> output_index;  // the outputs routed through the output node, by position
  bool inputs_routed = false;
  // Set by the output node, used and cleared by the input node (or by the output node when no input needs
  // a gradient). Unset when the input node runs: the gradient reached the inputs without passing through
  // this call's outputs (a double backward), so the hooks have nothing to report.
  std::optional<std::vector<Tensor>> grad_outputs;
};

// A backward hook's replacement gradients: one per entry; each defined one has the shape, dtype and device
// of the tensor it is the gradient of (`infos`, by routed position `index`).
void check_grad_replacement(const BackwardHookCall& c, const std::vector<Tensor>& replacement, size_t expected,
                            const std::vector<size_t>& index, const std::vector<Node::OutputInfo>& infos,
                            const char* hook, const char* what) {
  const Module& m = *c.module;
  MT_CHECK(replacement.size() == expected, m.type_name(), ": a ", hook, " returned ", replacement.size(), " ", what,
           " for ", expected, ". HINT: return one per entry, in order, undefined for none (std::nullopt keeps them)");
  for (size_t k = 0; k < index.size(); ++k) {
    const Tensor& g = replacement[index[k]];
    const Node::OutputInfo& info = infos[k];
    MT_CHECK(!g.defined() || (g.shape() == info.shape && g.dtype() == info.dtype && g.device() == info.device),
             m.type_name(), ": a ", hook, " returned ", what, " ", index[k], " as ", shape_str(g.shape()), " ",
             dtype_name(g.dtype()), " on ", g.device().str(), ", but its tensor is ", shape_str(info.shape), " ",
             dtype_name(info.dtype), " on ", info.device.str(), ". HINT: a gradient has its tensor's shape and dtype");
  }
}

// In front of the inputs: gradient k goes on to routed input k, after the full backward hooks.
class ModuleInputHookBackward final : public Node {
 public:
  explicit ModuleInputHookBackward(std::shared_ptr<BackwardHookCall> call) : call_(std::move(call)) {}
  std::string_view name() const override { return "ModuleInputHookBackward"; }
  bool supports_create_graph() const override { return true; }  // an identity, unless a hook replaces

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    BackwardHookCall& c = *call_;
    if (!c.grad_outputs) return std::move(grads);
    std::vector<Tensor> grad_inputs(c.n_inputs);
    for (size_t k = 0; k < grads.size(); ++k) grad_inputs[c.input_index[k]] = grads[k];
    for (const auto& hook : c.hooks) {
      HookResult r = (*hook)(*c.module, grad_inputs, *c.grad_outputs);
      if (!r) continue;
      check_grad_replacement(c, *r, c.n_inputs, c.input_index, outputs, "full backward hook", "grad_inputs");
      grad_inputs = std::move(*r);
    }
    c.grad_outputs.reset();
    for (size_t k = 0; k < grads.size(); ++k) grads[k] = grad_inputs[c.input_index[k]];
    return std::move(grads);
  }

 private:
  std::shared_ptr<BackwardHookCall> call_;
};

// Behind the outputs: gradient k comes from routed output k and goes on into the forward's graph, after the
// backward pre-hooks.
class ModuleOutputHookBackward final : public Node {
 public:
  explicit ModuleOutputHookBackward(std::shared_ptr<BackwardHookCall> call) : call_(std::move(call)) {}
  std::string_view name() const override { return "ModuleOutputHookBackward"; }
  bool supports_create_graph() const override { return true; }
  // The hooks see an output that no gradient reached as undefined (PyTorch's None), not as zeros.
  bool materialize_grads() const override { return false; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    BackwardHookCall& c = *call_;
    std::vector<Tensor> grad_outputs(c.n_outputs);
    for (size_t k = 0; k < grads.size(); ++k) grad_outputs[c.output_index[k]] = grads[k];
    for (const auto& hook : c.pre_hooks) {
      HookResult r = (*hook)(*c.module, grad_outputs);
      if (!r) continue;
      check_grad_replacement(c, *r, c.n_outputs, c.output_index, outputs, "full backward pre-hook", "grad_outputs");
      grad_outputs = std::move(*r);
    }
    for (size_t k = 0; k < grads.size(); ++k) grads[k] = grad_outputs[c.output_index[k]];
    if (c.inputs_routed) {
      c.grad_outputs = std::move(grad_outputs);
      return std::move(grads);
    }
    // No input needs a gradient, so no input node will run: the full backward hooks run now, with every
    // grad_input undefined (PyTorch does the same, and refuses a replacement there).
    const std::vector<Tensor> grad_inputs(c.n_inputs);
    for (const auto& hook : c.hooks) {
      HookResult r = (*hook)(*c.module, grad_inputs, grad_outputs);
      bool replaced = false;
      for (const Tensor& t : r.value_or(std::vector<Tensor>{})) replaced = replaced || t.defined();
      MT_CHECK(!replaced, c.module->type_name(),
               ": a full backward hook returned grad_inputs, but no input of this call requires grad. HINT: return "
               "std::nullopt (or undefined tensors) when grad_inputs are all undefined");
    }
    return std::move(grads);
  }

 private:
  std::shared_ptr<BackwardHookCall> call_;
};

// Replaces each tensor of `tensors` that requires grad with a new handle on the same data whose history is
// `node` (gradient k of the node goes to the k-th such tensor's old history); returns their positions.
std::vector<size_t> route_through(std::vector<Tensor>& tensors, const std::shared_ptr<Node>& node) {
  std::vector<size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined() || !tensors[i].requires_grad()) continue;
    node->next_edges.push_back(gradient_edge(tensors[i]));
    Tensor alias = tensors[i].detach();
    set_history(alias, node);
    tensors[i] = std::move(alias);
    index.push_back(i);
  }
  return index;
}

}  // namespace

detail::HookedForwardScope::HookedForwardScope(const Module* module) : previous_(g_hooked_forward) {
  g_hooked_forward = module;
}

detail::HookedForwardScope::~HookedForwardScope() { g_hooked_forward = previous_; }

bool detail::HookedForwardScope::take(const Module* module) {
  if (g_hooked_forward != module) return false;
  g_hooked_forward = nullptr;
  return true;
}

std::vector<Tensor> Module::call_hooked(std::vector<Tensor> inputs, const HookedForward& body) {
  // Inside call(module, ...), which runs this call's hooks around the forward: the body alone.
  if (!has_hooks() || detail::HookedForwardScope::take(this)) return body(inputs);
  const detail::ModuleHooks& hooks = *hooks_;
  // As in PyTorch, the backward hooks are taken when the call begins and each forward list when it is
  // reached (the forward hooks after the forward ran), each as a copy that a hook removing entries does not
  // change.
  std::shared_ptr<BackwardHookCall> call;
  if ((!hooks.backward.empty() || !hooks.backward_pre.empty()) && GradMode::is_enabled()) {
    call = std::make_shared<BackwardHookCall>();
    call->module = this;
    call->pre_hooks = snapshot(hooks.backward_pre);
    call->hooks = snapshot(hooks.backward);
  }
  for (const auto& hook : snapshot(hooks.forward_pre)) {
    HookResult r = (*hook)(*this, inputs);
    if (!r) continue;
    check_forward_replacement(*this, *r, inputs, "forward pre-hook", "inputs");
    inputs = std::move(*r);
  }
  if (call != nullptr) {
    call->n_inputs = inputs.size();
    if (!call->hooks.empty() && compute_requires_grad(inputs)) {
      call->input_index = route_through(inputs, std::make_shared<ModuleInputHookBackward>(call));
      call->inputs_routed = true;
    }
  }
  std::vector<Tensor> outputs = body(inputs);
  for (const auto& hook : snapshot(hooks.forward)) {
    HookResult r = (*hook)(*this, inputs, outputs);
    if (!r) continue;
    check_forward_replacement(*this, *r, outputs, "forward hook", "outputs");
    outputs = std::move(*r);
  }
  if (call != nullptr && compute_requires_grad(outputs)) {
    call->n_outputs = outputs.size();
    call->output_index = route_through(outputs, std::make_shared<ModuleOutputHookBackward>(call));
  }
  return outputs;
}

}  // namespace mantissa
