// clip_grad_norm_ and clip_grad_value_: CPU grads through optim/cpu/optim_kernels.cc, GPU grads through the ops.
#include "optim/clip_grad.h"

#include <cmath>

#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "optim/cpu/optim_kernels.h"

namespace mantissa {
namespace {

// The defined grads, checked to be contiguous f32/f64 (grads of fp32 masters are).
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> grads;
  for (const auto& p : params) {
    MT_CHECK(p.defined(), op, ": a parameter is undefined");
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    MT_CHECK(g.dtype() == DType::kF32 || g.dtype() == DType::kF64, op, ": a grad is ", dtype_name(g.dtype()), " ",
             shape_str(g.shape()), "; clipping works on the fp32 (or f64) grads of the master weights");
    MT_CHECK(g.is_contiguous(), op, ": a grad ", shape_str(g.shape()), " is not contiguous (it is clipped in place)");
    MT_CHECK(grads.empty() || g.device() == grads.front().device(), op, ": grads on ", g.device().str(), " and ",
             grads.front().device().str(), ". HINT: keep the model on one device");
    grads.push_back(g);
  }
  return grads;
}

std::vector<Tensor> tensors_of(const std::vector<NamedTensor>& params) {
  std::vector<Tensor> out;
  for (const auto& p : params) out.push_back(p.tensor);
  return out;
}

}  // namespace

// GPU grads: the same rule through the ops, so nothing is read on the host but the total. Each grad's sum of
// squares (or max |g|) is reduced on the device in its dtype, the per-grad parts are added in f64 there,
// and one read brings the total back (a synchronization: the total decides whether to scale).
double clip_grad_norm_device(const std::vector<Tensor>& grads, double max_norm, NormType norm_type) {
  NoGradGuard no_grad;
  Tensor acc = zeros({}, {.dtype = DType::kF64, .device = grads.front().device()});
  for (const auto& g : grads) {
    const Tensor flat = g.reshape({-1});
    if (norm_type == NormType::kL2) {
      acc = add(acc, sum(mul(flat, flat)).to(DType::kF64));
    } else {
      // A nan anywhere makes the total nan, as on the CPU (the reduction's max keeps a nan).
      const Tensor m = max(abs(flat)).to(DType::kF64);
      acc = where(ne(m, m), m, where(gt(m, acc), m, acc));
    }
  }
  const double parts = acc.item();
  const double total = norm_type == NormType::kL2 ? std::sqrt(parts) : parts;
  if (!std::isfinite(total)) return total;
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (const auto& g : grads) copy_(g, mul(g, coef));
  }
  return total;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, NormType norm_type) {
  const std::vector<Tensor> grads = grads_of(params, "clip_grad_norm_");
  if (!grads.empty() && !grads.front().device().is_cpu()) return clip_grad_norm_device(grads, max_norm, norm_type);
  double sum_squares = 0.0, max_abs = 0.0;
  for (const auto& g : grads) {
    double s = 0.0, m = 0.0;
    if (g.dtype() == DType::kF32) {
      cpu::norm_parts(g.data<float>(), g.numel(), &s, &m);
    } else {
      cpu::norm_parts(g.data<double>(), g.numel(), &s, &m);
    }
    sum_squares += s;
    max_abs = std::isnan(m) || std::isnan(max_abs) ? NAN : std::max(max_abs, m);
  }
  const double total = norm_type == NormType::kL2 ? std::sqrt(sum_squares) : max_abs;
  if (!std::isfinite(total)) return total;  // leave the grads for the scaler's inf check (see the header)
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (const auto& g : grads) {
      if (g.dtype() == DType::kF32) {
        cpu::scale(g.data<float>(), g.numel(), coef);
      } else {
        cpu::scale(g.data<double>(), g.numel(), coef);
      }
    }
  }
  return total;
}

double clip_grad_norm_(const std::vector<NamedTensor>& params, double max_norm, NormType norm_type) {
  return clip_grad_norm_(tensors_of(params), max_norm, norm_type);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  MT_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  for (const auto& g : grads_of(params, "clip_grad_value_")) {
    if (!g.device().is_cpu()) {
      NoGradGuard no_grad;
      copy_(g, clamp(g, -clip_value, clip_value));  // nan stays nan, as the CPU kernel
    } else if (g.dtype() == DType::kF32) {
      cpu::clamp_abs(g.data<float>(), g.numel(), clip_value);
    } else {
      cpu::clamp_abs(g.data<double>(), g.numel(), clip_value);
    }
  }
}

void clip_grad_value_(const std::vector<NamedTensor>& params, double clip_value) {
  clip_grad_value_(tensors_of(params), clip_value);
}

}  // namespace mantissa
