// SGD with momentum, dampening, Nesterov and weight decay, numerically PyTorch's torch.optim.SGD
// (the single-tensor path) on fp32 (or f64) master parameters. Momentum buffers are keyed by name.
#pragma once

#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "optim/options.h"

namespace mantissa {

class SGD : public OptimizerWithOptions<SGDOptions> {
 public:
  // params: usually model.named_parameters(). Names must be unique; tensors fp32/f64 leaves that require
  // grad. More groups with their own options: add_param_group.
  // `ladder`: how weights and state are stored (optim/precision_ladder.h); 8-bit or bf16 state needs momentum.
  SGD(std::vector<NamedTensor> params, SGDOptions options, PrecisionLadder ladder = {});

  // Per parameter (under each group's options):
  //   d = g + weight_decay * p
  //   buf = d on the first step, else momentum * buf + (1 - dampening) * d
  //   d = nesterov ? d + momentum * buf : buf        (when momentum != 0)
  //   p = p - lr * d
  // State: "step", and "momentum_buffer" when momentum != 0.
  const char* type_name() const override { return "SGD"; }

  // The momentum buffer of parameter `name`; undefined before its first step or without momentum.
  Tensor momentum_buffer(const std::string& name) const;

  // As OptimizerWithOptions's, and refuses a ladder with bf16 or 8-bit state for a group without momentum.
  void add_param_group(std::vector<NamedTensor> params, SGDOptions options);

 protected:
  void step_group(size_t group, const GradScaling* scaling) override;
  std::vector<std::string> state_buffers(const std::map<std::string, double>& h) const override;

 private:
  void check_ladder(const SGDOptions& o) const;
};

}  // namespace mantissa
