// Adam and AdamW: per parameter, state lookup by name and one call of cpu::adam_step.
#include "optim/adam.h"

#include "framework/error.h"

namespace mantissa {
namespace {

std::vector<std::string> adam_buffers(bool amsgrad) {
  if (amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

// One parameter. A group that switched amsgrad on after some steps starts its maximum from zeros, as
// PyTorch does when the state lacks it; switched off, the maximum is dropped.
void adam_update(ParamState& s, const Tensor& p, const Tensor& grad, const AdamOptions& o, cpu::WeightDecay mode,
                 cpu::ScalingPointers scaling, cpu::WorkingCopyOut copy) {
  if (o.amsgrad && !s.count("max_exp_avg_sq")) s["max_exp_avg_sq"] = zeros_like(p);
  if (!o.amsgrad) s.erase("max_exp_avg_sq");
  dispatch_floating(p.dtype(), "Adam.step", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      cpu::adam_step<T>({.param = p.data<T>(),
                         .grad = grad.data<T>(),
                         .exp_avg = s.at("exp_avg").data<T>(),
                         .exp_avg_sq = s.at("exp_avg_sq").data<T>(),
                         .max_exp_avg_sq = o.amsgrad ? s.at("max_exp_avg_sq").data<T>() : nullptr,
                         .step = s.at("step").data<int64_t>(),
                         .n = p.numel(),
                         .copy = copy},
                        o, mode, scaling);
    }
  });
}

}  // namespace

Adam::Adam(std::vector<NamedTensor> params, AdamOptions options) { add_param_group(std::move(params), options); }

void Adam::step_group(size_t group, const GradScaling* scaling) {
  const AdamOptions& o = options(group);
  for (const auto& [param, grad] : params_with_grad(group))
    adam_update(state_or_init(param, adam_buffers(o.amsgrad)), param.tensor, grad, o, cpu::WeightDecay::kL2,
                scaling_pointers(scaling), working_copy_out(param.name));
}

std::vector<std::string> Adam::state_buffers(const std::map<std::string, double>& h) const {
  return adam_buffers(h.at("amsgrad") != 0.0);
}

AdamW::AdamW(std::vector<NamedTensor> params, AdamWOptions options) { add_param_group(std::move(params), options); }

void AdamW::step_group(size_t group, const GradScaling* scaling) {
  const AdamOptions o = options(group).as_adam();
  for (const auto& [param, grad] : params_with_grad(group))
    adam_update(state_or_init(param, adam_buffers(o.amsgrad)), param.tensor, grad, o, cpu::WeightDecay::kDecoupled,
                scaling_pointers(scaling), working_copy_out(param.name));
}

std::vector<std::string> AdamW::state_buffers(const std::map<std::string, double>& h) const {
  return adam_buffers(h.at("amsgrad") != 0.0);
}

}  // namespace mantissa
