// Custom differentiable functions: torch.autograd.Function in C++, with the autocast behaviour of
// torch.amp.custom_fwd and custom_bwd, which PyTorch's C++ API does not have. A function is a struct with
// a static forward and a static backward; apply() runs the forward and records one node whose backward is
// the struct's:
//
//   struct ScaledTanh : Function<ScaledTanh> {
//     static constexpr std::string_view name = "ScaledTanh";
//     static Tensor forward(FunctionContext& ctx, const Tensor& x, double alpha) {
//       Tensor y = tanh(x) * alpha;
//       ctx.save_for_backward({y});           // an output: kept without a reference cycle
//       ctx.saved_data["alpha"] = alpha;      // anything that is not a Tensor
//       return y;
//     }
//     static std::vector<Tensor> backward(FunctionContext& ctx, std::vector<Tensor> grads) {
//       const Tensor y = ctx.saved_tensors()[0];
//       const double alpha = std::any_cast<double>(ctx.saved_data.at("alpha"));
//       return {grads[0] * (alpha - y * y / alpha), Tensor()};  // one per forward argument
//     }
//   };
//   Tensor out = ScaledTanh::apply(x, 2.0);
//
// forward takes the context, then any arguments; its Tensor arguments are the inputs a gradient may flow
// to, in order. It runs with grad mode off (its ops record nothing) and returns a Tensor or a
// std::vector<Tensor>; apply returns the same. Each floating output gets the node as its history, except
// those given to mark_non_differentiable; an output that is one of the inputs comes back as a new handle
// on the same data. backward gets one gradient per forward output (an output no gradient reached: zeros,
// or an undefined tensor after set_materialize_grads(false)) and returns one per forward argument: for a
// Tensor argument its gradient (undefined: none), for any other argument an undefined Tensor. A gradient
// must have its input's shape and device; one of another floating dtype is converted to the input's.
//
// Written with differentiable ops, backward can itself be differentiated: under create_graph (grad(...,
// {.create_graph = true}), a gradient penalty) its ops record, and saved inputs and outputs come back with
// their history. A saved intermediate (a tensor forward computed and did not return) has none, as the
// forward's ops record nothing: a function that saves one, or whose backward is not differentiable (it
// leaves the Tensor API, or its math is only first-order: declare `once_differentiable`), refuses
// create_graph with an error rather than give a second derivative short of terms. To differentiate twice,
// save inputs and outputs, and recompute the rest in backward.
//
// Autocast. Inside an AutocastGuard the ops a forward calls cast as they always do, and by default its
// backward runs as every backward formula does, with autocast off. A function's static `options`
// (FunctionOptions below) changes that the way PyTorch's decorators do:
//   custom_fwd(cast_inputs=torch.float32)  {.cast_inputs = DType::kF32}
//   custom_bwd                             {.backward_autocast = BackwardAutocast::kAsForward}
// and, beyond PyTorch, {.op = &my_op} gives the function a category in the autocast policy like a
// built-in op's (an OpInfo of its own, see amp::register_op in ops/autocast.h): its inputs are cast by
// that category for their device (kLowerPrecision, kFp32, kPromote or kRefused) before the forward runs.
#pragma once

#include <any>
#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "framework/autograd.h"
#include "framework/module.h"  // detail::kIsTensorArg, which module calls use too
#include "framework/tensor.h"
#include "ops/autocast.h"
#include "ops/op.h"

namespace mantissa {

// The autocast state a custom function's backward runs in.
enum class BackwardAutocast {
  kOff,        // autocast off, as every backward formula (PyTorch without custom_bwd)
  kAsForward,  // the state of the forward's ops, every device's switch and dtype (custom_bwd)
};

struct FunctionOptions {
  // custom_fwd(cast_inputs=...): when autocast is on for the device of the inputs (that of the first
  // defined Tensor argument), their floating non-f64 tensors on that device are cast to this dtype and the
  // forward runs with autocast off for that device; when it is off, nothing changes.
  std::optional<DType> cast_inputs;
  // The function's autocast category, from an op descriptor of its own: when autocast is on for the inputs'
  // device they are cast as amp::cast_inputs(*op, ...) casts a built-in op's, and the forward runs with
  // autocast off for that device. Exclusive with cast_inputs.
  const OpInfo* op = nullptr;
  BackwardAutocast backward_autocast = BackwardAutocast::kOff;
  // backward is not differentiable (torch.autograd.function.once_differentiable): create_graph through it
  // throws.
  bool once_differentiable = false;
};

namespace detail {
class FunctionNode;
class FunctionCall;
}  // namespace detail

// What a forward leaves for its backward; one per apply().
class FunctionContext {
 public:
  FunctionContext(const FunctionContext&) = delete;
  FunctionContext& operator=(const FunctionContext&) = delete;

  // In forward, once: the tensors backward needs (inputs, outputs, or intermediates). Outputs are kept
  // without their history, so that the node does not own itself; under create_graph they come back with it.
  void save_for_backward(std::vector<Tensor> tensors);
  // In backward: the saved tensors, in order (throws once the graph has been freed by a backward without
  // retain_graph).
  std::vector<Tensor> saved_tensors() const;
  // In forward: outputs that no gradient flows from (an argmax, a mask). They are returned without history.
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  // Whether backward gets zeros (the default) or undefined tensors for outputs no gradient reached.
  void set_materialize_grads(bool materialize) { materialize_grads_ = materialize; }
  // Whether forward argument `arg` (its position among all the arguments) is a Tensor that needs a gradient;
  // backward may skip the others.
  bool needs_input_grad(size_t arg) const;
  // Anything else backward needs (sizes, scalars, flags). Tensors belong in save_for_backward: kept here,
  // they are never freed with the graph.
  std::unordered_map<std::string, std::any> saved_data;

 private:
  friend class detail::FunctionNode;
  friend class detail::FunctionCall;
  explicit FunctionContext(Node* owner) : owner_(owner) {}

  Node* owner_;
  std::vector<std::unique_ptr<SavedTensor>> saved_;
  std::vector<Tensor> non_differentiable_;
  std::vector<Tensor> saved_values_;    // during forward: what save_for_backward got
  std::vector<bool> needs_input_grad_;  // by argument position
  bool materialize_grads_ = true;
  bool saved_once_ = false;
  bool in_forward_ = true;
};

namespace detail {

using BackwardFn = std::vector<Tensor> (*)(FunctionContext& ctx, std::vector<Tensor> grads);

// One apply(): casts the inputs as the options say, sets up the forward's scope (autocast, grad mode off)
// and its node, and records the outputs. Not templated, so that the code lives once in function.cc.
class FunctionCall {
 public:
  FunctionCall(std::string_view name, const FunctionOptions& options, BackwardFn backward, std::vector<Tensor> tensors,
               std::vector<size_t> positions, size_t arg_count);
  ~FunctionCall();
  FunctionCall(const FunctionCall&) = delete;
  FunctionCall& operator=(const FunctionCall&) = delete;

  FunctionContext& ctx();
  // The Tensor argument at position `arg` as the forward gets it (cast when the options say so).
  const Tensor& input_at(size_t arg) const;
  // Gives the outputs their history; returns them.
  std::vector<Tensor> finish(std::vector<Tensor> outputs);

 private:
  std::vector<Tensor> originals_;  // the Tensor arguments as given
  std::vector<Tensor> inputs_;     // as the forward gets them
  std::vector<size_t> positions_;  // each Tensor argument's position among all the arguments
  std::optional<amp::AutocastGuard> autocast_off_;
  std::shared_ptr<FunctionNode> node_;
  bool record_ = false;
  std::optional<NoGradGuard> no_grad_;
};

}  // namespace detail

// The base of a custom function `F`: F::apply(args...) runs F::forward(ctx, args...) and records F::backward.
// F may declare `static constexpr std::string_view name` (errors and the node's name, "<name>Backward") and
// `static constexpr FunctionOptions options`.
template <typename F>
class Function {
 public:
  template <typename... Args>
  static auto apply(Args&&... args) {
    std::vector<Tensor> tensors;
    std::vector<size_t> positions;
    size_t position = 0;
    (
        [&] {
          if constexpr (detail::kIsTensorArg<Args>) {
            tensors.push_back(args);
            positions.push_back(position);
          }
          ++position;
        }(),
        ...);
    detail::FunctionCall call(name_of(), options_of(), &backward_of, std::move(tensors), std::move(positions),
                              sizeof...(Args));
    using Result = decltype(F::forward(call.ctx(), std::forward<Args>(args)...));
    static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::vector<Tensor>>,
                  "a custom function's forward returns a Tensor or a std::vector<Tensor>");
    Result result = forward_of(call, std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
    if constexpr (std::is_same_v<Result, Tensor>) {
      return call.finish({std::move(result)})[0];
    } else {
      return call.finish(std::move(result));
    }
  }

 private:
  static constexpr std::string_view name_of() {
    if constexpr (requires { F::name; }) {
      return F::name;
    } else {
      return "Function";
    }
  }
  static constexpr FunctionOptions options_of() {
    if constexpr (requires { F::options; }) {
      return F::options;
    } else {
      return {};
    }
  }
  static std::vector<Tensor> backward_of(FunctionContext& ctx, std::vector<Tensor> grads) {
    return F::backward(ctx, std::move(grads));
  }
  // A Tensor argument is passed as the forward must see it (cast), any other as given.
  template <size_t I, typename A>
  static decltype(auto) pass(const detail::FunctionCall& call, A&& arg) {
    if constexpr (detail::kIsTensorArg<A>) {
      return call.input_at(I);
    } else {
      return std::forward<A>(arg);
    }
  }
  template <size_t... I, typename... Args>
  static auto forward_of(detail::FunctionCall& call, std::index_sequence<I...>, Args&&... args) {
    return F::forward(call.ctx(), pass<I>(call, std::forward<Args>(args))...);
  }
};

}  // namespace mantissa
