// SGD: per parameter, state lookup by name and one call of the kernel in optim/cpu/optim_kernels.cc; for
// CUDA parameters the group's update is one fused multi-tensor step (optim/cuda/fused_optim.cu).
#include "optim/sgd.h"

#include "framework/error.h"
#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "optim/cuda/fused_optim.h"
#endif

namespace mantissa {

SGD::SGD(std::vector<NamedTensor> params, SGDOptions options) { add_param_group(std::move(params), options); }

void SGD::step_group(size_t group, const GradScaling* scaling) {
  const SGDOptions& o = options(group);
  std::vector<std::string> buffers;
  if (o.momentum != 0.0) buffers.push_back("momentum_buffer");
  std::vector<cpu::SgdPointers<float>> on_device;  // CUDA parameters, stepped together after the loop
  Device device = kCPU;
  const auto with_grad = params_with_grad(group);  // holds the grads (maybe contiguous copies) until launched
  for (const auto& [param, grad] : with_grad) {
    check_step_devices(param, grad, scaling);
    ParamState& s = state_or_init(param, buffers);
    const Tensor& p = param.tensor;
    int64_t* step = s.at("step").data<int64_t>();
    // The group's momentum was changed after its first steps. Switched on: the buffer starts from d as on
    // a first step (PyTorch's "buffer is None"), so SGD's step count restarts. Switched off: the buffer is
    // dropped, so the saved state holds what the options say.
    if (o.momentum != 0.0 && !s.count("momentum_buffer")) {
      s["momentum_buffer"] = zeros_like(p);
      if (p.device().is_cuda()) {
        fill_(s.at("step"), 0.0);  // a device scalar: never written from the host
      } else {
        *step = 0;
      }
    }
    if (o.momentum == 0.0) s.erase("momentum_buffer");
    const Tensor buf = o.momentum != 0.0 ? s.at("momentum_buffer") : Tensor();
    if (p.device().is_cuda()) {
      MT_CHECK(on_device.empty() || device == p.device(), "SGD.step: parameter '", param.name, "' is on ",
               p.device().str(), " but others of its group on ", device.str(), ". HINT: one param group, one device");
      device = p.device();
      on_device.push_back({.param = p.data<float>(),
                           .grad = grad.data<float>(),
                           .momentum_buffer = buf.defined() ? buf.data<float>() : nullptr,
                           .step = step,
                           .n = p.numel(),
                           .copy = working_copy_out(param.name)});
      continue;
    }
    dispatch_floating(p.dtype(), "SGD.step", [&]<typename T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        cpu::sgd_step<T>({.param = p.data<T>(),
                          .grad = grad.data<T>(),
                          .momentum_buffer = buf.defined() ? buf.data<T>() : nullptr,
                          .step = step,
                          .n = p.numel(),
                          .copy = working_copy_out(param.name)},
                         o, scaling_pointers(scaling));
      }
    });
  }
  if (!on_device.empty()) {
#ifdef MANTISSA_WITH_CUDA
    gpu::DeviceGuard guard(device);
    gpu::sgd_step(on_device, o, scaling_pointers(scaling), gpu::current_stream(device));
#else
    MT_THROW("SGD.step: no kernel for ", device.str(), " in this build");
#endif
  }
}

std::vector<std::string> SGD::state_buffers(const std::map<std::string, double>& h) const {
  if (h.at("momentum") != 0.0) return {"momentum_buffer"};
  return {};
}

Tensor SGD::momentum_buffer(const std::string& name) const {
  const ParamState* s = state(name);
  if (s == nullptr || !s->count("momentum_buffer")) return Tensor();
  return s->at("momentum_buffer");
}

}  // namespace mantissa
