// Lion: per parameter, state lookup by name; per group, one call of the device's kernel
// (optim/group_step.h): on the CPU cpu::lion_step per parameter, on CUDA one fused multi-tensor step
// (optim/cuda/fused_optim.cu).
#include "optim/lion.h"

#include "framework/device_kernels.h"
#include "framework/error.h"
#include "optim/cuda/fused_optim_entries.h"
#include "optim/group_step.h"

namespace mantissa {
namespace {

void cpu_lion_step(std::span<const LionParamTensors> params, const LionOptions& o, cpu::ScalingPointers scaling) {
  for_each_param_pointers(params, [&](const auto& t) { cpu::lion_step(t, o, scaling); });
}

constexpr DeviceKernels<LionStepKernel> kLionStep{.cpu = &cpu_lion_step, .cuda = MT_CUDA_KERNEL(cuda_lion_step)};

}  // namespace

Lion::Lion(std::vector<NamedTensor> params, LionOptions options, PrecisionLadder ladder) {
  set_precision_ladder(ladder);
  add_param_group(std::move(params), options);
}

void Lion::step_group(size_t group, const GradScaling* scaling) {
  const LionOptions& o = options(group);
  if (!precision_ladder().is_default()) {
    ladder_step_group(group, scaling, {"exp_avg"}, {.kind = cpu::LadderKind::kLion, .lion = o});
    return;
  }
  const auto with_grad = params_with_grad(group);  // holds the grads (maybe contiguous copies) until launched
  const Device device = step_device(with_grad, scaling);
  kernel_for("Lion.step", kLionStep, device);  // no kernel for this device: fail before touching the state
  std::vector<LionParamTensors> list;
  for (const auto& [param, grad] : with_grad) {
    ParamState& s = state_or_init(param, {"exp_avg"});
    list.push_back({.param = param.tensor,
                    .grad = grad,
                    .exp_avg = s.at("exp_avg"),
                    .step = s.at("step"),
                    .copy = working_copy_out(param.name)});
  }
  dispatch("Lion.step", kLionStep, device, std::span<const LionParamTensors>(list), o, scaling_pointers(scaling));
}

std::vector<std::string> Lion::state_buffers(const std::map<std::string, double>&) const { return {"exp_avg"}; }

}  // namespace mantissa
