// MaxPool2d layer over ops/pool/pool.h.
#include "models/layers/pool.h"

namespace mantissa {

Tensor MaxPool2d::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) { return max_pool2d(in, options_); });
}

}  // namespace mantissa
