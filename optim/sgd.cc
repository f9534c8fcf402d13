// SGD: per parameter, state lookup by name and one call of the kernel in optim/cpu/optim_kernels.cc.
#include "optim/sgd.h"

#include "framework/error.h"

namespace mantissa {

SGD::SGD(std::vector<NamedTensor> params, SGDOptions options) { add_param_group(std::move(params), options); }

void SGD::step_group(size_t group, const GradScaling* scaling) {
  const SGDOptions& o = options(group);
  std::vector<std::string> buffers;
  if (o.momentum != 0.0) buffers.push_back("momentum_buffer");
  for (const auto& [param, grad] : params_with_grad(group)) {
    ParamState& s = state_or_init(param, buffers);
    const Tensor& p = param.tensor;
    int64_t* step = s.at("step").data<int64_t>();
    // The group's momentum was changed after its first steps. Switched on: the buffer starts from d as on
    // a first step (PyTorch's "buffer is None"), so SGD's step count restarts. Switched off: the buffer is
    // dropped, so the saved state holds what the options say.
    if (o.momentum != 0.0 && !s.count("momentum_buffer")) {
      s["momentum_buffer"] = zeros_like(p);
      *step = 0;
    }
    if (o.momentum == 0.0) s.erase("momentum_buffer");
    const Tensor buf = o.momentum != 0.0 ? s.at("momentum_buffer") : Tensor();
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
