// Lion (EvoLved Sign Momentum; Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") on fp32
// (or f64) master parameters, with the rounding order of the reference PyTorch implementation
// (lucidrains/lion-pytorch; PyTorch has no built-in Lion). State per parameter name: "step", "exp_avg".
#pragma once

#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "optim/options.h"

namespace mantissa {

// Per parameter (computed in the parameter's dtype, rounding after each op; [..] in f64):
//   p = p * [1 - lr * weight_decay]                 (decoupled decay, only when weight_decay != 0)
//   u = sign(beta1 * m + (1 - beta1) * g)           (the old m; sign(0) = 0, nan stays nan)
//   p = p - lr * u
//   m = beta2 * m + (1 - beta2) * g
// The paper writes the same step as p = p - lr * (u + weight_decay * p); the reference, followed here,
// applies the decay first as a product, so that rounding is the reference's.
class Lion : public OptimizerWithOptions<LionOptions> {
 public:
  Lion(std::vector<NamedTensor> params, LionOptions options = {}, PrecisionLadder ladder = {});
  const char* type_name() const override { return "Lion"; }

 protected:
  void step_group(size_t group, const GradScaling* scaling) override;
  std::vector<std::string> state_buffers(const std::map<std::string, double>& h) const override;
};

}  // namespace mantissa
