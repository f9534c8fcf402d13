// Adam and AdamW: per parameter, state lookup by name; per group, one call of the device's kernel
// (optim/group_step.h): on the CPU cpu::adam_step per parameter, on CUDA one fused multi-tensor step
// (optim/cuda/fused_optim.cu).
#include "optim/adam.h"

#include "framework/device_kernels.h"
#include "framework/error.h"
#include "optim/cuda/fused_optim_entries.h"
#include "optim/group_step.h"

namespace mantissa {
namespace {

std::vector<std::string> adam_buffers(bool amsgrad) {
  if (amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void cpu_adam_step(std::span<const AdamParamTensors> params, const AdamOptions& o, cpu::WeightDecay mode,
                   cpu::ScalingPointers scaling) {
  for_each_param_pointers(params, [&](const auto& t) { cpu::adam_step(t, o, mode, scaling); });
}

constexpr DeviceKernels<AdamStepKernel> kAdamStep{.cpu = &cpu_adam_step, .cuda = MT_CUDA_KERNEL(cuda_adam_step)};

// One parameter's part of the group's step. A group that switched amsgrad on after some steps starts its
// maximum from zeros, as PyTorch does when the state lacks it; switched off, the maximum is dropped.
AdamParamTensors adam_param(const ParamState& s, const NamedTensor& param, const Tensor& grad, const AdamOptions& o,
                            cpu::WorkingCopyOut copy) {
  return {.param = param.tensor,
          .grad = grad,
          .exp_avg = s.at("exp_avg"),
          .exp_avg_sq = s.at("exp_avg_sq"),
          .max_exp_avg_sq = o.amsgrad ? s.at("max_exp_avg_sq") : Tensor(),
          .step = s.at("step"),
          .copy = copy};
}

}  // namespace

Adam::Adam(std::vector<NamedTensor> params, AdamOptions options, PrecisionLadder ladder) {
  set_precision_ladder(ladder);
  add_param_group(std::move(params), options);
}

void Adam::step_group(size_t group, const GradScaling* scaling) {
  adam_step_group(group, scaling, options(group), cpu::WeightDecay::kL2);
}

template <typename Options>
void AdamFamily<Options>::adam_step_group(size_t group, const GradScaling* scaling, const AdamOptions& o,
                                          cpu::WeightDecay mode) {
  const char* op = mode == cpu::WeightDecay::kL2 ? "Adam.step" : "AdamW.step";
  const auto buffers = adam_buffers(o.amsgrad);
  // A group that switched amsgrad on after some steps starts its maximum from zeros, as PyTorch does when the state
  // lacks it; switched off, the maximum is dropped.
  for (const NamedTensor& p : this->group_params(group)) {
    if (!p.tensor.grad().defined() || this->state(p.name) == nullptr) continue;
    ParamState& s = this->mutable_state(p.name);
    if (o.amsgrad && !s.count("max_exp_avg_sq")) this->add_state_buffer(s, p.tensor, "max_exp_avg_sq");
    if (!o.amsgrad) this->erase_state_buffer(s, "max_exp_avg_sq");
  }
  if (!this->precision_ladder().is_default()) {
    this->ladder_step_group(group, scaling, buffers, {.kind = cpu::LadderKind::kAdam, .adam = o, .mode = mode});
    return;
  }
  const auto with_grad = this->params_with_grad(group);  // holds the grads (maybe contiguous copies) until launched
  const Device device = this->step_device(with_grad, scaling);
  kernel_for(op, kAdamStep, device);  // no kernel for this device: fail before touching the state
  std::vector<AdamParamTensors> list;
  for (const auto& [param, grad] : with_grad)
    list.push_back(adam_param(this->state_or_init(param, buffers), param, grad, o, this->working_copy_out(param.name)));
  dispatch(op, kAdamStep, device, std::span<const AdamParamTensors>(list), o, mode, this->scaling_pointers(scaling));
}

template <typename Options>
std::vector<std::string> AdamFamily<Options>::state_buffers(const std::map<std::string, double>& h) const {
  return adam_buffers(h.at("amsgrad") != 0.0);
}

template class AdamFamily<AdamOptions>;
template class AdamFamily<AdamWOptions>;

AdamW::AdamW(std::vector<NamedTensor> params, AdamWOptions options, PrecisionLadder ladder) {
  set_precision_ladder(ladder);
  add_param_group(std::move(params), options);
}

void AdamW::step_group(size_t group, const GradScaling* scaling) {
  adam_step_group(group, scaling, options(group).as_adam(), cpu::WeightDecay::kDecoupled);
}

}  // namespace mantissa
