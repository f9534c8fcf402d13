// unscale_grads_ and check_grads_finite_: one kernel call per parameter grad.
#include "optim/grad_scaling.h"

#include "framework/error.h"
#include "optim/cpu/optim_kernels.h"

namespace mantissa {
namespace {

void check_scalar(const Tensor& t, const char* op, const char* what) {
  MT_CHECK(t.defined() && t.dtype() == DType::kF32 && t.numel() == 1, op, ": ", what,
           " must be an f32 scalar tensor, got ",
           t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) : "undefined");
}

// Calls f(grad) for each defined grad of the optimizer's parameters (contiguous f32/f64: the optimizer
// checked the parameters, and a grad has its parameter's dtype).
template <typename F>
void for_each_grad(const Optimizer& optimizer, const char* op, F&& f) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const auto& p : optimizer.group_params(g)) {
      const Tensor& grad = p.tensor.grad();
      if (!grad.defined()) continue;
      MT_CHECK(grad.is_contiguous(), op, ": the grad of '", p.name, "' ", shape_str(grad.shape()),
               " is not contiguous (it is unscaled in place)");
      f(grad);
    }
}

}  // namespace

void unscale_grads_(const Optimizer& optimizer, const Tensor& inv_scale, const Tensor& found_inf) {
  check_scalar(inv_scale, "unscale_grads_", "inv_scale");
  check_scalar(found_inf, "unscale_grads_", "found_inf");
  for_each_grad(optimizer, "unscale_grads_", [&](const Tensor& g) {
    if (g.dtype() == DType::kF32) {
      cpu::unscale_and_check(g.data<float>(), g.numel(), inv_scale.data<float>(), found_inf.data<float>());
    } else {
      cpu::unscale_and_check(g.data<double>(), g.numel(), inv_scale.data<float>(), found_inf.data<float>());
    }
  });
}

void check_grads_finite_(const Optimizer& optimizer, const Tensor& found_inf) {
  check_scalar(found_inf, "check_grads_finite_", "found_inf");
  for_each_grad(optimizer, "check_grads_finite_", [&](const Tensor& g) {
    if (g.dtype() == DType::kF32) {
      cpu::check_finite(g.data<float>(), g.numel(), found_inf.data<float>());
    } else {
      cpu::check_finite(g.data<double>(), g.numel(), found_inf.data<float>());
    }
  });
}

}  // namespace mantissa
