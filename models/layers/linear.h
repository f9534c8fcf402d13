// Linear: y = x W^T + b over the last dim, as torch.nn.Linear, with its default initialisation.
#pragma once

#include "framework/generator.h"
#include "framework/module.h"
#include "ops/matmul/activation.h"

namespace mantissa {

struct LinearOptions {
  bool bias = true;
  DType dtype = DType::kF32;       // of the master parameters
  Generator* generator = nullptr;  // for the initial values; default_generator() when null
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  std::string type_name() const override { return "Linear"; }
  // x[..., in_features] -> [..., out_features]
  Tensor forward(const Tensor& x);
  // act(forward(x)) as one op (linear_act: the activation in the GEMM's epilogue). With hooks on this
  // layer, forward (hooks and all) then the activation's op.
  Tensor forward_act(const Tensor& x, Activation act);

  int64_t in_features, out_features;
  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features]; undefined (and not registered) without bias
};

}  // namespace mantissa
