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
AdamParamTensors adam_param(ParamState& s, const NamedTensor& param, const Tensor& grad, const AdamOptions& o,
                            cpu::WorkingCopyOut copy) {
  if (o.amsgrad && !s.count("max_exp_avg_sq")) s["max_exp_avg_sq"] = zeros_like(param.tensor);
  if (!o.amsgrad) s.erase("max_exp_avg_sq");
  return {.param = param.tensor,
          .grad = grad,
          .exp_avg = s.at("exp_avg"),
          .exp_avg_sq = s.at("exp_avg_sq"),
          .max_exp_avg_sq = o.amsgrad ? s.at("max_exp_avg_sq") : Tensor(),
          .step = s.at("step"),
          .copy = copy};
}

}  // namespace

Adam::Adam(std::vector<NamedTensor> params, AdamOptions options) { add_param_group(std::move(params), options); }

void Adam::step_group(size_t group, const GradScaling* scaling) {
  const AdamOptions& o = options(group);
  const auto with_grad = params_with_grad(group);  // holds the grads (maybe contiguous copies) until launched
  const Device device = step_device(with_grad, scaling);
  kernel_for("Adam.step", kAdamStep, device);  // no kernel for this device: fail before touching the state
  std::vector<AdamParamTensors> list;
  for (const auto& [param, grad] : with_grad)
    list.push_back(
        adam_param(state_or_init(param, adam_buffers(o.amsgrad)), param, grad, o, working_copy_out(param.name)));
  dispatch("Adam.step", kAdamStep, device, std::span<const AdamParamTensors>(list), o, cpu::WeightDecay::kL2,
           scaling_pointers(scaling));
}

std::vector<std::string> Adam::state_buffers(const std::map<std::string, double>& h) const {
  return adam_buffers(h.at("amsgrad") != 0.0);
}

AdamW::AdamW(std::vector<NamedTensor> params, AdamWOptions options) { add_param_group(std::move(params), options); }

void AdamW::step_group(size_t group, const GradScaling* scaling) {
  const AdamOptions o = options(group).as_adam();
  const auto with_grad = params_with_grad(group);
  const Device device = step_device(with_grad, scaling);
  kernel_for("AdamW.step", kAdamStep, device);
  std::vector<AdamParamTensors> list;
  for (const auto& [param, grad] : with_grad)
    list.push_back(
        adam_param(state_or_init(param, adam_buffers(o.amsgrad)), param, grad, o, working_copy_out(param.name)));
  dispatch("AdamW.step", kAdamStep, device, std::span<const AdamParamTensors>(list), o, cpu::WeightDecay::kDecoupled,
           scaling_pointers(scaling));
}

std::vector<std::string> AdamW::state_buffers(const std::map<std::string, double>& h) const {
  return adam_buffers(h.at("amsgrad") != 0.0);
}

}  // namespace mantissa
