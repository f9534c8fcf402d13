// Adam and AdamW: per parameter, state lookup by name and one call of cpu::adam_step; for CUDA parameters
// the group's update is one fused multi-tensor step (optim/cuda/fused_optim.cu).
#include "optim/adam.h"

#include "framework/error.h"
#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "optim/cuda/fused_optim.h"
#endif

namespace mantissa {
namespace {

std::vector<std::string> adam_buffers(bool amsgrad) {
  if (amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

// The CUDA parameters of a group, stepped together after the per-parameter state lookups.
struct DeviceList {
  std::vector<cpu::AdamPointers<float>> tensors;
  Device device = kCPU;
};

// One parameter. A group that switched amsgrad on after some steps starts its maximum from zeros, as
// PyTorch does when the state lacks it; switched off, the maximum is dropped.
void adam_update(ParamState& s, const NamedTensor& param, const Tensor& grad, const AdamOptions& o,
                 cpu::WeightDecay mode, cpu::ScalingPointers scaling, cpu::WorkingCopyOut copy, DeviceList& cuda) {
  const Tensor& p = param.tensor;
  if (o.amsgrad && !s.count("max_exp_avg_sq")) s["max_exp_avg_sq"] = zeros_like(p);
  if (!o.amsgrad) s.erase("max_exp_avg_sq");
  if (p.device().is_cuda()) {
    MT_CHECK(cuda.tensors.empty() || cuda.device == p.device(), "Adam.step: parameter '", param.name, "' is on ",
             p.device().str(), " but others of its group on ", cuda.device.str(),
             ". HINT: one param group, one device");
    cuda.device = p.device();
    cuda.tensors.push_back({.param = p.data<float>(),
                            .grad = grad.data<float>(),
                            .exp_avg = s.at("exp_avg").data<float>(),
                            .exp_avg_sq = s.at("exp_avg_sq").data<float>(),
                            .max_exp_avg_sq = o.amsgrad ? s.at("max_exp_avg_sq").data<float>() : nullptr,
                            .step = s.at("step").data<int64_t>(),
                            .n = p.numel(),
                            .copy = copy});
    return;
  }
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

void launch_on_device(const DeviceList& cuda, const AdamOptions& o, cpu::WeightDecay mode,
                      cpu::ScalingPointers scaling) {
  if (cuda.tensors.empty()) return;
#ifdef MANTISSA_WITH_CUDA
  gpu::DeviceGuard guard(cuda.device);
  gpu::adam_step(cuda.tensors, o, mode, scaling, gpu::current_stream(cuda.device));
#else
  (void)o;
  (void)mode;
  (void)scaling;
  MT_THROW("Adam.step: no kernel for ", cuda.device.str(), " in this build");
#endif
}

}  // namespace

Adam::Adam(std::vector<NamedTensor> params, AdamOptions options) { add_param_group(std::move(params), options); }

void Adam::step_group(size_t group, const GradScaling* scaling) {
  const AdamOptions& o = options(group);
  const auto with_grad = params_with_grad(group);  // holds the grads (maybe contiguous copies) until launched
  DeviceList cuda;
  for (const auto& [param, grad] : with_grad) {
    check_step_devices(param, grad, scaling);
    adam_update(state_or_init(param, adam_buffers(o.amsgrad)), param, grad, o, cpu::WeightDecay::kL2,
                scaling_pointers(scaling), working_copy_out(param.name), cuda);
  }
  launch_on_device(cuda, o, cpu::WeightDecay::kL2, scaling_pointers(scaling));
}

std::vector<std::string> Adam::state_buffers(const std::map<std::string, double>& h) const {
  return adam_buffers(h.at("amsgrad") != 0.0);
}

AdamW::AdamW(std::vector<NamedTensor> params, AdamWOptions options) { add_param_group(std::move(params), options); }

void AdamW::step_group(size_t group, const GradScaling* scaling) {
  const AdamOptions o = options(group).as_adam();
  const auto with_grad = params_with_grad(group);
  DeviceList cuda;
  for (const auto& [param, grad] : with_grad) {
    check_step_devices(param, grad, scaling);
    adam_update(state_or_init(param, adam_buffers(o.amsgrad)), param, grad, o, cpu::WeightDecay::kDecoupled,
                scaling_pointers(scaling), working_copy_out(param.name), cuda);
  }
  launch_on_device(cuda, o, cpu::WeightDecay::kDecoupled, scaling_pointers(scaling));
}

std::vector<std::string> AdamW::state_buffers(const std::map<std::string, double>& h) const {
  return adam_buffers(h.at("amsgrad") != 0.0);
}

}  // namespace mantissa
