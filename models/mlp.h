// MLP: Linear layers with ReLU between them, as a PyTorch user would write with nn.Sequential.
// Parameters are named "layers.<i>.weight" / "layers.<i>.bias" with i counting the Sequential's slots,
// ReLUs included: MLP(784, {256, 256}, 10) has layers.0 (784->256), layers.2, layers.4 (256->10), exactly
// the state_dict of `self.layers = nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)`.
#pragma once

#include <memory>
#include <vector>

#include "framework/generator.h"
#include "framework/module.h"
#include "models/layers/sequential.h"

namespace mantissa {

struct MLPOptions {
  DType dtype = DType::kF32;       // of the master parameters
  Generator* generator = nullptr;  // for the initial values; default_generator() when null
};

class MLP : public Module {
 public:
  // in_features -> hidden[0] -> ... -> hidden.back() -> out_features; no hidden sizes gives one Linear.
  MLP(int64_t in_features, std::vector<int64_t> hidden, int64_t out_features, MLPOptions options = {});
  std::string type_name() const override { return "MLP"; }
  // x[..., in_features] -> logits [..., out_features] (no activation after the last Linear).
  Tensor forward(const Tensor& x);

  int64_t in_features, out_features;
  std::vector<int64_t> hidden;
  std::shared_ptr<Sequential> layers;
};

}  // namespace mantissa
