// SGD with momentum, dampening, Nesterov and weight decay, numerically PyTorch's torch.optim.SGD
// (the single-tensor path) on fp32 (or f64) master parameters. Momentum buffers are keyed by name.
// Minimal on purpose: the optimizers issue generalises it (param groups, schedules, state in checkpoints).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "framework/module.h"

namespace mantissa {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0, as in PyTorch
};

class SGD {
 public:
  // params: usually model.named_parameters(). Names must be unique; tensors leaves that require grad.
  SGD(std::vector<NamedTensor> params, SGDOptions options);

  // One update of every parameter that has a grad (a parameter whose grad is undefined is skipped):
  //   d = g + weight_decay * p
  //   buf = d on the first step, else momentum * buf + (1 - dampening) * d
  //   d = nesterov ? d + momentum * buf : buf        (when momentum != 0)
  //   p = p - lr * d
  void step();
  // Sets every parameter's grad to undefined (set_to_none).
  void zero_grad();

  const SGDOptions& options() const { return options_; }
  const std::vector<NamedTensor>& params() const { return params_; }
  // The momentum buffer of parameter `name`; undefined before its first step or without momentum.
  Tensor momentum_buffer(const std::string& name) const;

 private:
  std::vector<NamedTensor> params_;
  SGDOptions options_;
  std::map<std::string, Tensor> momentum_buffers_;
};

}  // namespace mantissa
