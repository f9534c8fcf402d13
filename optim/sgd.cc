// SGD: per parameter, state lookup by name; per group, one call of the device's kernel (optim/group_step.h):
// on the CPU cpu::sgd_step per parameter, on CUDA one fused multi-tensor step (optim/cuda/fused_optim.cu).
#include "optim/sgd.h"

#include "framework/device_kernels.h"
#include "framework/error.h"
#include "optim/cuda/fused_optim_entries.h"
#include "optim/group_step.h"

namespace mantissa {
namespace {

void cpu_sgd_step(std::span<const SgdParamTensors> params, const SGDOptions& o, cpu::ScalingPointers scaling) {
  for_each_param_pointers(params, [&](const auto& t) { cpu::sgd_step(t, o, scaling); });
}

constexpr DeviceKernels<SgdStepKernel> kSgdStep{.cpu = &cpu_sgd_step, .cuda = MT_CUDA_KERNEL(cuda_sgd_step)};

}  // namespace

SGD::SGD(std::vector<NamedTensor> params, SGDOptions options, PrecisionLadder ladder) {
  set_precision_ladder(ladder);
  add_param_group(std::move(params), options);
}

void SGD::add_param_group(std::vector<NamedTensor> params, SGDOptions options) {
  check_ladder(options);
  OptimizerWithOptions<SGDOptions>::add_param_group(std::move(params), options);
}

void SGD::check_ladder(const SGDOptions& o) const {
  MT_CHECK(o.momentum != 0.0 || precision_ladder().optimizer_state == StateStorage::kFp32,
           "SGD: optimizer_state=", state_storage_name(precision_ladder().optimizer_state),
           " stores the momentum buffer, but momentum=0 gives SGD no state to store. HINT: set a momentum, or ",
           "optimizer_state=fp32");
}

void SGD::step_group(size_t group, const GradScaling* scaling) {
  const SGDOptions& o = options(group);
  check_ladder(o);  // the momentum may have been changed since the group was added
  std::vector<std::string> buffers;
  if (o.momentum != 0.0) buffers.push_back("momentum_buffer");
  // The group's momentum was changed after its first steps. Switched on: the buffer starts from d as on a first step
  // (PyTorch's "buffer is None"), so SGD's step count restarts. Switched off: the buffer is dropped, so the saved
  // state holds what the options say.
  for (const NamedTensor& param : group_params(group)) {
    if (!param.tensor.grad().defined() || state(param.name) == nullptr) continue;
    ParamState& s = mutable_state(param.name);
    if (o.momentum != 0.0 && !s.count("momentum_buffer")) {
      add_state_buffer(s, param.tensor, "momentum_buffer");
      fill_(s.at("step"), 0.0);  // on a GPU a device scalar: never written from the host
    }
    if (o.momentum == 0.0) erase_state_buffer(s, "momentum_buffer");
  }
  if (!precision_ladder().is_default()) {
    ladder_step_group(group, scaling, buffers, {.kind = cpu::LadderKind::kSgd, .sgd = o});
    return;
  }
  const auto with_grad = params_with_grad(group);  // holds the grads (maybe contiguous copies) until launched
  const Device device = step_device(with_grad, scaling);
  kernel_for("SGD.step", kSgdStep, device);  // no kernel for this device: fail before touching the state
  std::vector<SgdParamTensors> list;
  for (const auto& [param, grad] : with_grad) {
    ParamState& s = state_or_init(param, buffers);
    const Tensor& p = param.tensor;
    list.push_back({.param = p,
                    .grad = grad,
                    .momentum_buffer = o.momentum != 0.0 ? s.at("momentum_buffer") : Tensor(),
                    .step = s.at("step"),
                    .copy = working_copy_out(param.name)});
  }
  dispatch("SGD.step", kSgdStep, device, std::span<const SgdParamTensors>(list), o, scaling_pointers(scaling));
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
