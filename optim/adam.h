// Adam and AdamW, numerically PyTorch 1.13's torch.optim.Adam / AdamW (single-tensor path) on fp32 (or
// f64) master parameters, with amsgrad. State per parameter name: "step", "exp_avg", "exp_avg_sq" and,
// with amsgrad, "max_exp_avg_sq" (PyTorch's names).
#pragma once

#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "optim/options.h"

namespace mantissa {

// Per parameter, with t the parameter's step count after this step (doubles in [..] are computed in f64,
// the rest in the parameter's dtype, rounding after each op as PyTorch does):
//   g = g + weight_decay * p                       (Adam; AdamW instead p = p * [1 - lr * weight_decay])
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g            (amsgrad: vmax = max(vmax, v), used below for v)
//   p = p + [-lr / (1 - beta1^t)] * m / (sqrt(v) / [sqrt(1 - beta2^t)] + eps)
// What Adam and AdamW share: the group step (they differ in the options' defaults and the weight decay's form) and
// the state's names. Defined in adam.cc for the two option types.
template <typename Options>
class AdamFamily : public OptimizerWithOptions<Options> {
 protected:
  void adam_step_group(size_t group, const GradScaling* scaling, const AdamOptions& o, cpu::WeightDecay mode);
  std::vector<std::string> state_buffers(const std::map<std::string, double>& h) const override;
};

class Adam : public AdamFamily<AdamOptions> {
 public:
  // `ladder`: how weights and moments are stored (optim/precision_ladder.h).
  Adam(std::vector<NamedTensor> params, AdamOptions options = {}, PrecisionLadder ladder = {});
  const char* type_name() const override { return "Adam"; }

 protected:
  void step_group(size_t group, const GradScaling* scaling) override;
};

class AdamW : public AdamFamily<AdamWOptions> {
 public:
  AdamW(std::vector<NamedTensor> params, AdamWOptions options = {}, PrecisionLadder ladder = {});
  const char* type_name() const override { return "AdamW"; }

 protected:
  void step_group(size_t group, const GradScaling* scaling) override;
};

}  // namespace mantissa
