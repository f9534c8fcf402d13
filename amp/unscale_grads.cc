// unscale_grads_ and check_grads_finite_: the grads checked and gathered once, then the kernel of
// found_inf's device: on the CPU one call per grad (amp/cpu/amp_kernels.h), on CUDA one multi-tensor pass
// per grad dtype (amp/cuda/host/amp_kernels.h) on the device's current stream.
#include "amp/unscale_grads.h"

#include <span>
#include <string>
#include <vector>

#include "amp/cpu/amp_kernels.h"
#include "amp/cuda/host/amp_kernels.h"
#include "framework/device_kernels.h"
#include "framework/error.h"

namespace mantissa {
namespace {

void check_scalar(const Tensor& t, const char* op, const char* what) {
  MT_CHECK(t.defined() && t.dtype() == DType::kF32 && t.numel() == 1, op, ": ", what,
           " must be an f32 scalar tensor, got ",
           t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) : "undefined");
}

// The defined grads of the optimizer's parameters (contiguous f32/f64: the optimizer checked the
// parameters, and a grad has its parameter's dtype), each on found_inf's device.
std::vector<Tensor> grads_of(const Optimizer& optimizer, const char* op, Device device) {
  std::vector<Tensor> grads;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const auto& p : optimizer.group_params(g)) {
      const Tensor& grad = p.tensor.grad();
      if (!grad.defined()) continue;
      MT_CHECK(grad.is_contiguous(), op, ": the grad of '", p.name, "' ", shape_str(grad.shape()),
               " is not contiguous (it is unscaled in place)");
      MT_CHECK(grad.device() == device, op, ": the grad of '", p.name, "' is on ", grad.device().str(),
               " but found_inf is on ", device.str(), ". HINT: keep the scaler's tensors on the parameters' device");
      grads.push_back(grad);
    }
  return grads;
}

template <typename T>
void cpu_pass(const Tensor& g, const Tensor* inv_scale, float* found_inf) {
  if (inv_scale != nullptr) {
    cpu::unscale_and_check(g.data<T>(), g.numel(), inv_scale->data<float>(), found_inf);
  } else {
    cpu::check_finite(g.data<T>(), g.numel(), found_inf);
  }
}

// Each grad checked, and with an inv_scale unscaled, one kernel call per grad.
void cpu_unscale_grads(std::span<const Tensor> grads, const Tensor* inv_scale, const Tensor& found_inf) {
  for (const Tensor& g : grads) {
    if (g.dtype() == DType::kF32) {
      cpu_pass<float>(g, inv_scale, found_inf.data<float>());
    } else {
      cpu_pass<double>(g, inv_scale, found_inf.data<float>());
    }
  }
}

constexpr DeviceKernels<decltype(cpu_unscale_grads)> kUnscaleGrads{.cpu = &cpu_unscale_grads,
                                                                   .cuda = MT_CUDA_KERNEL(cuda_unscale_grads)};

}  // namespace

void unscale_grads_(const Optimizer& optimizer, const Tensor& inv_scale, const Tensor& found_inf) {
  check_scalar(inv_scale, "unscale_grads_", "inv_scale");
  check_scalar(found_inf, "unscale_grads_", "found_inf");
  MT_CHECK(inv_scale.device() == found_inf.device(), "unscale_grads_: inv_scale is on ", inv_scale.device().str(),
           " but found_inf on ", found_inf.device().str());
  auto* kernel = kernel_for("unscale_grads_", kUnscaleGrads, found_inf.device());
  kernel(grads_of(optimizer, "unscale_grads_", found_inf.device()), &inv_scale, found_inf);
}

void check_grads_finite_(const Optimizer& optimizer, const Tensor& found_inf) {
  check_scalar(found_inf, "check_grads_finite_", "found_inf");
  auto* kernel = kernel_for("check_grads_finite_", kUnscaleGrads, found_inf.device());
  kernel(grads_of(optimizer, "check_grads_finite_", found_inf.device()), nullptr, found_inf);
}

}  // namespace mantissa
