// The activations a linear layer's GEMM applies in its epilogue (linear_act in ops/matmul/matmul.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace mantissa {

// kGelu is the erf form (PyTorch's default), kGeluTanh its tanh approximation (approximate="tanh").
enum class Activation : uint8_t { kNone, kRelu, kGelu, kGeluTanh };

constexpr std::string_view activation_name(Activation act) {
  switch (act) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
  }
  return "?";
}

// The backward reads the activation's input (GELU) or its output (ReLU: y > 0 says where the gradient
// passes, as relu's own backward does; nothing else needs keeping).
constexpr bool activation_saves_input(Activation act) {
  return act == Activation::kGelu || act == Activation::kGeluTanh;
}

}  // namespace mantissa
