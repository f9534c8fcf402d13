// ReLU and GELU layers: thin wrappers over the ops in ops/unary.cc.
#include "models/layers/activation.h"

namespace mantissa {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Tensor GELU::forward(const Tensor& x) { return gelu(x, options_.approximate); }

}  // namespace mantissa
