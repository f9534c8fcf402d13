// Default parameter initialisations (see init.h for the bounds).
#include "models/layers/init.h"

#include <cmath>

#include "framework/random.h"

namespace mantissa {

Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, DType dtype, Generator* generator) {
  Tensor t = empty(shape, {.dtype = dtype});
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  uniform_(t, -bound, bound, generator);
  return t;
}

Tensor standard_normal(const Shape& shape, DType dtype, Generator* generator) {
  Tensor t = empty(shape, {.dtype = dtype});
  normal_(t, 0.0, 1.0, generator);
  return t;
}

}  // namespace mantissa
