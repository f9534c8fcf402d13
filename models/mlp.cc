// MLP: Linear-ReLU-...-Linear in a Sequential child named "layers".
#include "models/mlp.h"

#include "framework/error.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"

namespace mantissa {

MLP::MLP(int64_t in, std::vector<int64_t> hidden_sizes, int64_t out, MLPOptions options)
    : in_features(in), out_features(out), hidden(std::move(hidden_sizes)) {
  MT_CHECK(in > 0 && out > 0, "MLP: in_features and out_features must be positive, got ", in, " and ", out);
  layers = register_module("layers", std::make_shared<Sequential>());
  const LinearOptions lin{.dtype = options.dtype, .generator = options.generator};
  int64_t width = in;
  for (int64_t h : hidden) {
    MT_CHECK(h > 0, "MLP: hidden sizes must be positive, got ", h);
    layers->push_back(std::make_shared<Linear>(width, h, lin));
    layers->push_back(std::make_shared<ReLU>());
    width = h;
  }
  layers->push_back(std::make_shared<Linear>(width, out, lin));
}

Tensor MLP::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    MT_CHECK(in.dim() >= 1 && in.size(-1) == in_features, "MLP: expected an input [..., ", in_features, "], got ",
             shape_str(in.shape()), ". HINT: flatten images first, e.g. x.reshape({N, -1})");
    return layers->forward(in);
  });
}

}  // namespace mantissa
