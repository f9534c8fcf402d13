// Sequential: a chain of layers, each a Module with Tensor forward(const Tensor&), run in order.
// Children are named "0", "1", ... so parameter names match PyTorch's nn.Sequential ("0.weight").
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/error.h"
#include "framework/module.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"

namespace mantissa {

// A module Sequential can hold: one tensor in, one tensor out.
template <typename M>
concept TensorLayer = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  // Sequential(std::make_shared<Linear>(20, 16), std::make_shared<ReLU>(), ...)
  template <TensorLayer... Ms>
  explicit Sequential(std::shared_ptr<Ms>... layers) {
    (push_back(std::move(layers)), ...);
  }

  std::string type_name() const override { return "Sequential"; }

  // Appends `layer` as child std::to_string(size()) and returns it.
  template <TensorLayer M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> layer) {
    register_module(std::to_string(forwards_.size()), layer);
    // The raw pointer stays valid: the child list owns the layer as long as this Sequential lives. call()
    // runs the layer's hooks even when its forward does not (a module of your own).
    forwards_.push_back([raw = layer.get()](const Tensor& x) -> Tensor { return call(*raw, x); });
    // A ReLU or GELU right after a Linear runs in the Linear's GEMM epilogue (Linear::forward_act), unless
    // the activation layer has hooks when forward runs (they then see it as a layer of its own).
    Fusion fusion{.activation = layer.get()};
    if constexpr (std::is_same_v<M, ReLU>) fusion.act = Activation::kRelu;
    if constexpr (std::is_same_v<M, GELU>) {
      fusion.act = layer->options().approximate == GeluApproximation::kTanh ? Activation::kGeluTanh : Activation::kGelu;
    }
    if (fusion.act != Activation::kNone && !fusions_.empty()) fusion.linear = fusions_.back().self_linear;
    if constexpr (std::is_same_v<M, Linear>) fusion.self_linear = layer.get();
    fusions_.push_back(fusion);
    return layer;
  }

  // x through every layer in order; x itself when empty.
  Tensor forward(const Tensor& x);

  size_t size() const { return forwards_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  // Layer i as its concrete type; throws when it is another type.
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[i]);
    MT_CHECK(typed != nullptr, "Sequential.at: layer ", i, " is a ", (*this)[i]->type_name(),
             ", not the type asked for");
    return typed;
  }

 private:
  struct Fusion {
    Module* activation = nullptr;        // this layer
    Activation act = Activation::kNone;  // what it computes, when it is an activation layer
    Linear* linear = nullptr;            // the Linear before it, whose forward_act may run both
    Linear* self_linear = nullptr;       // this layer, when it is a Linear
  };
  std::vector<std::function<Tensor(const Tensor&)>> forwards_;
  std::vector<Fusion> fusions_;  // one per layer
};

}  // namespace mantissa
