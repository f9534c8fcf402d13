// Module hooks, PyTorch's nn.Module hooks in C++: the hook signatures, the handle that removes a hook, and
// the per-module lists Module keeps them in (Module::register_forward_hook and its kin, module.h).
//
// A hook gets the module and the Tensor arguments of one call, in order (non-Tensor arguments are not
// passed; an optional Tensor argument left out is an undefined Tensor in its place), and returns either
// nothing (std::nullopt: it only looks) or replacements, one per entry it was given:
//   forward pre-hook    (module, inputs)                    -> replacement inputs
//   forward hook        (module, inputs, outputs)           -> replacement outputs
//   full backward pre   (module, grad_outputs)              -> replacement grad_outputs
//   full backward hook  (module, grad_inputs, grad_outputs) -> replacement grad_inputs
// A hook that returns void is accepted too and counts as returning std::nullopt.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/tensor.h"

namespace mantissa {

class Module;

using HookResult = std::optional<std::vector<Tensor>>;
using ForwardPreHook = std::function<HookResult(Module& module, const std::vector<Tensor>& inputs)>;
using ForwardHook =
    std::function<HookResult(Module& module, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs)>;
using FullBackwardPreHook = std::function<HookResult(Module& module, const std::vector<Tensor>& grad_outputs)>;
using FullBackwardHook = std::function<HookResult(Module& module, const std::vector<Tensor>& grad_inputs,
                                                  const std::vector<Tensor>& grad_outputs)>;

namespace detail {

// One module's hooks, each list in registration order. Entries are shared so that a call can run a snapshot
// of a list while a hook removes entries from it, and so that a stateful hook is never copied.
struct ModuleHooks {
  template <typename Fn>
  struct Entry {
    uint64_t id;
    std::shared_ptr<const Fn> fn;
  };
  std::vector<Entry<ForwardPreHook>> forward_pre;
  std::vector<Entry<ForwardHook>> forward;
  std::vector<Entry<FullBackwardPreHook>> backward_pre;
  std::vector<Entry<FullBackwardHook>> backward;
  uint64_t next_id = 0;

  bool empty() const { return forward_pre.empty() && forward.empty() && backward_pre.empty() && backward.empty(); }
  void remove(uint64_t id);
};

// The hook as the list stores it: a callable returning void is wrapped to return std::nullopt.
template <typename Fn>
struct HookAdapter;
template <typename... Args>
struct HookAdapter<std::function<HookResult(Args...)>> {
  template <typename F>
  static std::function<HookResult(Args...)> wrap(F&& f) {
    static_assert(std::is_invocable_v<F&, Args...>,
                  "a module hook must be callable with (Module&, the tensors of its kind); see framework/hooks.h");
    using R = std::invoke_result_t<F&, Args...>;
    if constexpr (std::is_void_v<R>) {
      return [f = std::forward<F>(f)](Args... args) mutable -> HookResult {
        f(std::forward<Args>(args)...);
        return std::nullopt;
      };
    } else {
      static_assert(std::is_convertible_v<R, HookResult>,
                    "a module hook returns void, std::nullopt or std::vector<Tensor> (the replacements)");
      return std::function<HookResult(Args...)>(std::forward<F>(f));
    }
  }
};

}  // namespace detail

// Removes the hook it was returned for, like PyTorch's RemovableHandle: remove() takes the hook off its
// module's list; calling it again, on a default-constructed handle, or after the module is gone does nothing.
// Letting a handle go out of scope does not remove the hook.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<detail::ModuleHooks> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}
  void remove();

 private:
  std::weak_ptr<detail::ModuleHooks> hooks_;
  uint64_t id_ = 0;
};

}  // namespace mantissa
