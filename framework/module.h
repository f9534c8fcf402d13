// Module: a node in a tree of layers owning named parameters (leaf tensors that require grad, the fp32
// masters), buffers (state that is saved but not trained, e.g. BatchNorm's running statistics) and child
// modules. Names follow PyTorch's state_dict: dotted paths in registration order ("0.weight",
// "encoder.layers.1.bias"), so optimizer state, checkpoints and PyTorch interop key on the same strings.
// Hooks (framework/hooks.h) run around every call of a module through call(module, args...), PyTorch's
// module(x), whatever its forward does, and around every call of a built-in layer's forward (call_hooked).
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/error.h"
#include "framework/hooks.h"
#include "framework/tensor.h"

namespace mantissa {

// A tensor with its dotted name: a parameter or a buffer of a module tree.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// load_state_dict: kStrict requires the names to match exactly; kNonStrict loads the names both sides
// have and reports the rest.
enum class LoadStrictness { kStrict, kNonStrict };

// A module of a tree with its dotted path ("" for the root, "layers.0", "transformer.h.1.attn").
struct NamedModule {
  std::string name;
  Module* module;
};

struct LoadResult {
  std::vector<std::string> missing;     // in the module, not in the state
  std::vector<std::string> unexpected;  // in the state, not in the module
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;  // parameters are shared handles: a copy would alias them silently
  Module& operator=(const Module&) = delete;

  // The class name for messages and printing ("Linear"); layers override it.
  virtual std::string type_name() const { return "Module"; }

  // Registers `value` as parameter `name` and returns it, now requiring grad. `value` must be a leaf
  // of a floating dtype (detach() it if it has history). Names are unique within a module and have no '.'.
  Tensor register_parameter(const std::string& name, Tensor value);
  // Registers a buffer: saved in state_dict(), never trained. Any dtype (num_batches_tracked is i64).
  Tensor register_buffer(const std::string& name, Tensor value);
  // Registers `module` as child `name` and returns it.
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from Module");
    add_child(name, module);
    return module;
  }

  // Every parameter of the tree, dotted names, registration order (own first, then each child's).
  // A tensor registered under two names (weight tying) appears once, under its first name, as in PyTorch.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  // This module's direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  std::vector<std::shared_ptr<Module>> children() const;
  // The child registered as `name` (not dotted); throws when there is none.
  std::shared_ptr<Module> child(const std::string& name) const;
  // This module and every descendant with its dotted path, PyTorch's named_modules(): depth first, a module
  // before its children, children in registration order, the root as "". A module reachable by two paths
  // appears once, under the first.
  std::vector<NamedModule> named_modules();

  // Training mode (the default) or evaluation mode, for this module and all its descendants. Dropout
  // and BatchNorm read it.
  void train();
  void eval();
  bool is_training() const { return training_; }

  // Sets every parameter's grad to undefined (PyTorch's set_to_none=True default): the next backward
  // writes fresh gradients instead of adding to stale ones.
  void zero_grad();

  // Parameters and buffers by dotted name, in order, detached (sharing storage with the module).
  std::vector<NamedTensor> state_dict() const;
  // Copies each named tensor into the module's parameter or buffer of that name (in place, converting
  // the dtype; the shapes must match). kStrict throws, before copying anything, when a name is missing
  // or unexpected; kNonStrict returns those names instead.
  LoadResult load_state_dict(const std::map<std::string, Tensor>& state,
                             LoadStrictness strictness = LoadStrictness::kStrict);
  LoadResult load_state_dict(const std::vector<NamedTensor>& state,
                             LoadStrictness strictness = LoadStrictness::kStrict);

  // Moves every parameter and buffer of the tree (and the parameters' grads) to `device`, in place: each
  // tensor keeps its identity, so the handles layers and optimizers hold see the move, and its name, leaf
  // status and requires_grad. Tensors come out contiguous; two distinct tensors that shared storage (a
  // buffer viewing a parameter) no longer do. Throws, before moving anything, when `device` is a GPU this
  // process cannot use. Autocast ignores a registered working copy left on the old device; call the
  // optimizer's refresh_working_copies() (or create the optimizer after the move).
  Module& to(Device device);
  // Converts every floating parameter and floating buffer of the tree (and the parameters' grads) to `dtype`,
  // in place, as PyTorch's model.to(torch.bfloat16): each tensor keeps its identity, name, leaf status and
  // requires_grad; integer buffers (num_batches_tracked) stay as they are. The rung of issue 36's ladder without
  // fp32 masters trains bf16 parameters made this way (optim/precision_ladder.h). Create the optimizer after the
  // conversion: it checks its parameters' dtype when they are added.
  Module& to(DType dtype);

  // The tree, one module per line with its parameter shapes.
  std::string str() const;

  // ---- Hooks: PyTorch's register_forward_pre_hook, register_forward_hook, register_full_backward_pre_hook
  // and register_full_backward_hook (signatures in framework/hooks.h). Each runs at every call of this
  // module through call(module, ...) (below), and at every call of its forward when that forward goes
  // through call_hooked, as every built-in layer's does (a module's own forward() called directly, like
  // PyTorch's module.forward(x), runs no hook unless it does); the hooks of one kind run in registration
  // order, each seeing what the previous one
  // returned. A call runs the hooks registered when its list is reached (PyTorch iterates over a copy of
  // the list): a hook removed during the call, by itself or by another, still runs in that call if it was
  // due, and not in the next; one added during the call first runs in the next. The backward hooks of a
  // call are those registered when the call began, even if removed before its backward runs. Each returns
  // a handle whose remove() takes the hook off.
  //
  // forward pre-hook (module, inputs): before the forward; replacement inputs go to the forward instead.
  template <typename F>
  HookHandle register_forward_pre_hook(F&& hook) {
    return add_hook(&detail::ModuleHooks::forward_pre,
                    detail::HookAdapter<ForwardPreHook>::wrap(std::forward<F>(hook)));
  }
  // forward hook (module, inputs, outputs): after the forward; replacement outputs are returned instead.
  template <typename F>
  HookHandle register_forward_hook(F&& hook) {
    return add_hook(&detail::ModuleHooks::forward, detail::HookAdapter<ForwardHook>::wrap(std::forward<F>(hook)));
  }
  // Full backward pre-hook (module, grad_outputs): when the gradients of this call's outputs are known, before
  // they flow into the forward's graph; replacements flow instead. An output no gradient reached has an
  // undefined entry.
  template <typename F>
  HookHandle register_full_backward_pre_hook(F&& hook) {
    return add_hook(&detail::ModuleHooks::backward_pre,
                    detail::HookAdapter<FullBackwardPreHook>::wrap(std::forward<F>(hook)));
  }
  // Full backward hook (module, grad_inputs, grad_outputs): when the gradients with respect to this call's
  // inputs are computed; replacement grad_inputs flow on to the inputs instead. An input that does not
  // require grad has an undefined entry; when none does, the hook runs as soon as grad_outputs are known,
  // with all grad_inputs undefined, and must not replace them. The forward must run in grad mode for the
  // backward hooks to be set up (as in PyTorch); the module must outlive that backward.
  template <typename F>
  HookHandle register_full_backward_hook(F&& hook) {
    return add_hook(&detail::ModuleHooks::backward, detail::HookAdapter<FullBackwardHook>::wrap(std::forward<F>(hook)));
  }
  // Whether any hook is registered on this module (not its children).
  bool has_hooks() const { return hooks_ != nullptr && !hooks_->empty(); }

 protected:
  // The call point every built-in layer's forward goes through, so that its hooks run also when its forward
  // is called directly: body(x) when the module has no hook (one test, no allocation), or when call() is
  // already running this call's hooks, else the hooks around body. A forward of one tensor:
  //   Tensor Linear::forward(const Tensor& x) {
  //     return call_hooked(x, [this](const Tensor& in) { return linear(in, weight, bias); });
  //   }
  // The body must use its argument, not x: a pre-hook may replace it, and the backward hooks route it.
  template <typename Body>
  Tensor call_hooked(const Tensor& x, Body&& body) {
    if (!has_hooks()) [[likely]]
      return body(x);
    return call_hooked(std::vector<Tensor>{x},
                       [&body](const std::vector<Tensor>& in) { return std::vector<Tensor>{body(in[0])}; })[0];
  }
  // Any number of tensors in and out (GPT::forward(idx, targets) -> {logits, loss}): the hooks see the
  // vectors, and a replacement must keep their length; the caller maps the outputs back by position. Check
  // has_hooks() first to skip building the vectors.
  using HookedForward = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
  std::vector<Tensor> call_hooked(std::vector<Tensor> inputs, const HookedForward& body);

 private:
  template <typename M, typename... Args>
  requires std::derived_from<M, Module>
  friend auto call(M& module, Args&&... args)
      -> std::remove_cvref_t<decltype(module.forward(std::forward<Args>(args)...))>;

  template <typename Fn>
  HookHandle add_hook(std::vector<detail::ModuleHooks::Entry<Fn>> detail::ModuleHooks::*list, Fn hook) {
    MT_CHECK(static_cast<bool>(hook), type_name(), ": the hook to register is empty");
    if (hooks_ == nullptr) hooks_ = std::make_shared<detail::ModuleHooks>();
    const uint64_t id = hooks_->next_id++;
    ((*hooks_).*list).push_back({id, std::make_shared<const Fn>(std::move(hook))});
    return HookHandle(hooks_, id);
  }

  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* what) const;
  void set_training(bool training);
  // Calls fn(prefix + name, tensor) for own entries of `list`, then recurses into children.
  template <typename F>
  void visit(const std::string& prefix, bool parameters, F&& fn) const;
  void print(std::string& out, const std::string& name, int depth) const;

  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  // Created by the first registration; the handles hold it weakly, so they outlive the module harmlessly.
  std::shared_ptr<detail::ModuleHooks> hooks_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

namespace detail {

// Marks the module whose hooks call() is running around its forward, for this thread, so that the
// module's own call_hooked (a built-in layer's) runs its body without running them a second time. The scope
// restores the previous mark, so calls nest.
class HookedForwardScope {
 public:
  explicit HookedForwardScope(const Module* module);
  ~HookedForwardScope();
  HookedForwardScope(const HookedForwardScope&) = delete;
  HookedForwardScope& operator=(const HookedForwardScope&) = delete;
  // True, once, when `module` is the marked one: its call_hooked is inside call()'s hooks.
  static bool take(const Module* module);

 private:
  const Module* previous_;
};

template <typename T>
inline constexpr bool kIsTensorArg = std::is_same_v<std::remove_cvref_t<T>, Tensor>;

// forward's arguments with the Tensor ones taken, in order, from `tensors` (the inputs after the pre-hooks)
// and the others passed on as given.
template <typename M, typename Tuple, size_t... K>
decltype(auto) forward_with(M& module, const std::vector<Tensor>& tensors, Tuple& args, std::index_sequence<K...>) {
  static constexpr std::array<bool, sizeof...(K)> is_tensor{kIsTensorArg<std::tuple_element_t<K, Tuple>>...};
  static constexpr std::array<size_t, sizeof...(K)> tensor_index = [] {
    std::array<size_t, sizeof...(K)> index{};
    size_t n = 0;
    for (size_t k = 0; k < is_tensor.size(); ++k) index[k] = is_tensor[k] ? n++ : 0;
    return index;
  }();
  const auto arg = [&]<size_t k>() -> decltype(auto) {
    if constexpr (is_tensor[k]) {
      return Tensor(tensors[tensor_index[k]]);
    } else {
      return std::forward<std::tuple_element_t<k, Tuple>>(std::get<k>(args));
    }
  };
  return module.forward(arg.template operator()<K>()...);
}

}  // namespace detail

// The public call of a module, PyTorch's module(x): runs `module`'s hooks around module.forward(args...),
// whatever that forward does, so the hooks of a module of your own run without call_hooked; a built-in
// layer's, whose forward runs them too, run once. The hooks see the Tensor arguments, in order (others are
// passed on as given), and the result: forward must return a Tensor or a std::vector<Tensor> (a forward
// with other results runs its hooks itself, through call_hooked, as GPT::forward does). Without hooks it is
// module.forward(args...) after one test.
//   struct Residual : Module {
//     std::shared_ptr<Linear> fc = register_module("fc", std::make_shared<Linear>(8, 8));
//     Tensor forward(const Tensor& x) { return x + fc->forward(x); }
//   };
//   Residual block;
//   block.register_forward_hook(...);
//   Tensor y = call(block, x);  // the hook runs; block.forward(x) would skip it
template <typename M, typename... Args>
requires std::derived_from<M, Module>
auto call(M& module, Args&&... args) -> std::remove_cvref_t<decltype(module.forward(std::forward<Args>(args)...))> {
  using Result = std::remove_cvref_t<decltype(module.forward(std::forward<Args>(args)...))>;
  static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::vector<Tensor>>,
                "call(module, ...): the module's forward must return a Tensor or a std::vector<Tensor>, the outputs "
                "its hooks see. HINT: a forward with other results runs its hooks through call_hooked itself");
  if (!module.has_hooks()) [[likely]]
    return module.forward(std::forward<Args>(args)...);
  std::vector<Tensor> inputs;
  (
      [&] {
        if constexpr (detail::kIsTensorArg<Args>) inputs.push_back(args);
      }(),
      ...);
  std::tuple<Args&&...> forwarded(std::forward<Args>(args)...);
  std::vector<Tensor> outputs = module.call_hooked(std::move(inputs), [&](const std::vector<Tensor>& in) {
    detail::HookedForwardScope scope(&module);
    Result r = detail::forward_with(module, in, forwarded, std::index_sequence_for<Args...>{});
    if constexpr (std::is_same_v<Result, Tensor>) {
      return std::vector<Tensor>{std::move(r)};
    } else {
      return r;
    }
  });
  if constexpr (std::is_same_v<Result, Tensor>) {
    return std::move(outputs[0]);
  } else {
    return outputs;
  }
}

}  // namespace mantissa
