// ReLU and GELU layers: thin wrappers over the ops in ops/elementwise/unary.cc.
#include "models/layers/activation.h"

namespace mantissa {

Tensor ReLU::forward(const Tensor& x) {
  return call_hooked(x, [](const Tensor& in) { return relu(in); });
}

Tensor GELU::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) { return gelu(in, options_.approximate); });
}

}  // namespace mantissa
