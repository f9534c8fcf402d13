// Dropout layer over ops/dropout/dropout.h.
#include "models/layers/dropout.h"

#include "framework/error.h"
#include "ops/dropout/dropout.h"

namespace mantissa {

Dropout::Dropout(DropoutOptions options) : options_(options) {
  MT_CHECK(options.p >= 0.0 && options.p <= 1.0, "Dropout: p must be in [0, 1], got ", options.p);
}

Tensor Dropout::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    if (!is_training() || options_.p == 0.0) return in;
    return dropout(in, options_.p, options_.generator);
  });
}

}  // namespace mantissa
