// Linear layer over ops/matmul/matmul.h's linear().
#include "models/layers/linear.h"

#include "framework/error.h"
#include "models/layers/init.h"
#include "ops/matmul/matmul.h"

namespace mantissa {

Linear::Linear(int64_t in, int64_t out, LinearOptions options) : in_features(in), out_features(out) {
  MT_CHECK(in >= 0 && out >= 0, "Linear: sizes must be non-negative, got in_features ", in, " out_features ", out);
  weight = register_parameter("weight", fan_in_uniform({out, in}, in, options.dtype, options.generator));
  if (options.bias) bias = register_parameter("bias", fan_in_uniform({out}, in, options.dtype, options.generator));
}

Tensor Linear::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    MT_CHECK(in.dim() >= 1 && in.size(-1) == in_features, "Linear: expected an input [..., ", in_features, "], got ",
             shape_str(in.shape()), ". HINT: the last dim must be in_features");
    return linear(in, weight, bias);
  });
}

Tensor Linear::forward_act(const Tensor& x, Activation act) {
  if (has_hooks()) return activate(forward(x), act);
  MT_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear: expected an input [..., ", in_features, "], got ",
           shape_str(x.shape()), ". HINT: the last dim must be in_features");
  return linear_act(x, weight, bias, act);
}

}  // namespace mantissa
