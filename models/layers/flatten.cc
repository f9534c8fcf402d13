// Flatten layer over Tensor::flatten.
#include "models/layers/flatten.h"

namespace mantissa {

Tensor Flatten::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) { return in.flatten(options_.start_dim, options_.end_dim); });
}

}  // namespace mantissa
