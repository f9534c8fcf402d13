// Activation layers: ReLU and GELU as modules, for Sequential. No parameters.
#pragma once

#include "framework/module.h"
#include "ops/elementwise/elementwise.h"

namespace mantissa {

class ReLU : public Module {
 public:
  std::string type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x);
};

struct GeluOptions {
  GeluApproximation approximate = GeluApproximation::kNone;  // kTanh: PyTorch's approximate="tanh"
};

class GELU : public Module {
 public:
  explicit GELU(GeluOptions options = {}) : options_(options) {}
  std::string type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& x);
  const GeluOptions& options() const { return options_; }

 private:
  GeluOptions options_;
};

}  // namespace mantissa
