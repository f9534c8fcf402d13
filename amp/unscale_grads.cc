// unscale_grads_ and check_grads_finite_: on the CPU one kernel call per parameter grad; on CUDA one
// multi-tensor pass per grad dtype (amp/cuda/amp_kernels.cu) on the device's current stream.
#include "amp/grad_scaling.h"

#include <map>
#include <vector>

#include "amp/cpu/amp_kernels.h"
#include "framework/error.h"
#ifdef MANTISSA_WITH_CUDA
#include "amp/cuda/amp_kernels.h"
#include "framework/cuda/stream.h"
#endif

namespace mantissa {
namespace {

void check_scalar(const Tensor& t, const char* op, const char* what) {
  MT_CHECK(t.defined() && t.dtype() == DType::kF32 && t.numel() == 1, op, ": ", what,
           " must be an f32 scalar tensor, got ",
           t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) : "undefined");
}

// Calls f(grad) for each defined grad of the optimizer's parameters (contiguous f32/f64: the optimizer
// checked the parameters, and a grad has its parameter's dtype), each on found_inf's device.
template <typename F>
void for_each_grad(const Optimizer& optimizer, const char* op, Device device, F&& f) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const auto& p : optimizer.group_params(g)) {
      const Tensor& grad = p.tensor.grad();
      if (!grad.defined()) continue;
      MT_CHECK(grad.is_contiguous(), op, ": the grad of '", p.name, "' ", shape_str(grad.shape()),
               " is not contiguous (it is unscaled in place)");
      MT_CHECK(grad.device() == device, op, ": the grad of '", p.name, "' is on ", grad.device().str(),
               " but found_inf is on ", device.str(), ". HINT: keep the scaler's tensors on the parameters' device");
      f(grad);
    }
}

#ifdef MANTISSA_WITH_CUDA
// The CUDA pass: all grads of one dtype in one multi-tensor sweep, nothing read on the host.
void cuda_pass(const Optimizer& optimizer, const char* op, const Tensor* inv_scale, const Tensor& found_inf,
               gpu::GradPass pass) {
  std::map<DType, std::pair<std::vector<void*>, std::vector<int64_t>>> by_dtype;
  for_each_grad(optimizer, op, found_inf.device(), [&](const Tensor& g) {
    auto& [ptrs, sizes] = by_dtype[g.dtype()];
    ptrs.push_back(g.data_ptr());
    sizes.push_back(g.numel());
  });
  gpu::DeviceGuard guard(found_inf.device());
  const cudaStream_t stream = gpu::current_stream(found_inf.device());
  for (const auto& [dtype, list] : by_dtype)
    gpu::unscale_and_check(dtype, list.first, list.second, inv_scale ? inv_scale->data<float>() : nullptr,
                           found_inf.data<float>(), pass, stream);
}
#endif

}  // namespace

void unscale_grads_(const Optimizer& optimizer, const Tensor& inv_scale, const Tensor& found_inf) {
  check_scalar(inv_scale, "unscale_grads_", "inv_scale");
  check_scalar(found_inf, "unscale_grads_", "found_inf");
  MT_CHECK(inv_scale.device() == found_inf.device(), "unscale_grads_: inv_scale is on ", inv_scale.device().str(),
           " but found_inf on ", found_inf.device().str());
  if (found_inf.device().is_cuda()) {
#ifdef MANTISSA_WITH_CUDA
    cuda_pass(optimizer, "unscale_grads_", &inv_scale, found_inf, gpu::GradPass::kUnscale);
    return;
#else
    MT_THROW("unscale_grads_: no kernel for ", found_inf.device().str(), " in this build");
#endif
  }
  for_each_grad(optimizer, "unscale_grads_", found_inf.device(), [&](const Tensor& g) {
    if (g.dtype() == DType::kF32) {
      cpu::unscale_and_check(g.data<float>(), g.numel(), inv_scale.data<float>(), found_inf.data<float>());
    } else {
      cpu::unscale_and_check(g.data<double>(), g.numel(), inv_scale.data<float>(), found_inf.data<float>());
    }
  });
}

void check_grads_finite_(const Optimizer& optimizer, const Tensor& found_inf) {
  check_scalar(found_inf, "check_grads_finite_", "found_inf");
  if (found_inf.device().is_cuda()) {
#ifdef MANTISSA_WITH_CUDA
    cuda_pass(optimizer, "check_grads_finite_", nullptr, found_inf, gpu::GradPass::kCheckOnly);
    return;
#else
    MT_THROW("check_grads_finite_: no kernel for ", found_inf.device().str(), " in this build");
#endif
  }
  for_each_grad(optimizer, "check_grads_finite_", found_inf.device(), [&](const Tensor& g) {
    if (g.dtype() == DType::kF32) {
      cpu::check_finite(g.data<float>(), g.numel(), found_inf.data<float>());
    } else {
      cpu::check_finite(g.data<double>(), g.numel(), found_inf.data<float>());
    }
  });
}

}  // namespace mantissa
