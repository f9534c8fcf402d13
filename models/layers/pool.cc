// MaxPool2d layer over ops/pool.h.
#include "models/layers/pool.h"

namespace mantissa {

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, options_); }

}  // namespace mantissa
