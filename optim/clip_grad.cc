// clip_grad_norm_ and clip_grad_value_: CPU grads through optim/cpu/optim_kernels.cc; for GPU grads the norm
// through its CUDA entry (optim/cuda/clip_grad_entries.h), the value clamp through the ops.
#include "optim/clip_grad.h"

#include <cmath>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "optim/cpu/optim_kernels.h"
#include "optim/cuda/clip_grad_entries.h"
#include "optim/norm_order.h"

namespace mantissa {
namespace {

// The defined grads, checked to be contiguous f32/f64 (grads of fp32 masters are) or bf16/f16 (grads of the 16-bit
// weights of the precision ladder without masters, optim/precision_ladder.h).
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> grads;
  for (const auto& p : params) {
    MT_CHECK(p.defined(), op, ": a parameter is undefined");
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    MT_CHECK(is_floating(g.dtype()), op, ": a grad is ", dtype_name(g.dtype()), " ", shape_str(g.shape()),
             "; clipping works on floating grads");
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

// CPU grads: the partials of all the grads into one list, combined in norm_order's order.
Tensor cpu_clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, cpu::NormPartial what) {
  std::vector<int64_t> sizes;
  for (const auto& g : grads) sizes.push_back(g.numel());
  const std::vector<int64_t> offsets = norm_order::partial_offsets(sizes);
  std::vector<double> partials(static_cast<size_t>(offsets.back()));
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    double* out = partials.data() + offsets[i];
    if (g.dtype() == DType::kF32) {
      cpu::norm_partials(g.data<float>(), g.numel(), what, out);
    } else {
      cpu::norm_partials(g.data<double>(), g.numel(), what, out);
    }
  }
  const double combined = cpu::combine_partials(partials.data(), offsets.back(), what);
  const double total = what == cpu::NormPartial::kSumSquares ? rn::sqrt(combined) : combined;
  const double coef = norm_order::clip_coefficient(total, max_norm);
  if (coef < 1.0) {
    for (const auto& g : grads) {
      if (g.dtype() == DType::kF32) {
        cpu::scale(g.data<float>(), g.numel(), coef);
      } else {
        cpu::scale(g.data<double>(), g.numel(), coef);
      }
    }
  }
  return scalar_tensor(total, {.dtype = DType::kF64});
}

constexpr DeviceKernels<ClipGradNormKernel> kClipGradNorm{.cpu = &cpu_clip_grad_norm,
                                                          .cuda = MT_CUDA_KERNEL(cuda_clip_grad_norm)};

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, NormType norm_type, const char* op) {
  const std::vector<Tensor> grads = grads_of(params, op);
  const cpu::NormPartial what = norm_type == NormType::kL2 ? cpu::NormPartial::kSumSquares : cpu::NormPartial::kMaxAbs;
  if (grads.empty()) return scalar_tensor(0.0, {.dtype = DType::kF64});  // the norm of nothing
  // 16-bit grads are widened to f32 (exactly), clipped there, and rounded back to nearest: PyTorch's bf16
  // g.mul_(coef), which computes in f32 and rounds once. Unclipped, the round trip gives the grads back unchanged,
  // so the copy back needs no host read of the coefficient.
  std::vector<Tensor> wide;
  bool narrow = false;
  for (const Tensor& g : grads) {
    narrow |= is_low_precision(g.dtype());
    wide.push_back(is_low_precision(g.dtype()) ? g.to(DType::kF32) : g);
  }
  if (!narrow) return dispatch(op, kClipGradNorm, grads.front().device(), grads, max_norm, what);
  Tensor total = dispatch(op, kClipGradNorm, grads.front().device(), wide, max_norm, what);
  if (std::isinf(max_norm)) return total;  // the norm alone (the Trainer's metric): nothing was scaled
  NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i)
    if (is_low_precision(grads[i].dtype())) copy_(grads[i], wide[i]);
  return total;
}

}  // namespace

Tensor enqueue_clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, NormType norm_type) {
  return clip_grad_norm(params, max_norm, norm_type, "enqueue_clip_grad_norm_");
}

Tensor enqueue_clip_grad_norm_(const std::vector<NamedTensor>& params, double max_norm, NormType norm_type) {
  return enqueue_clip_grad_norm_(tensors_of(params), max_norm, norm_type);
}

Tensor clip_sharded_grad_norm_(std::span<const GradSlice> slices, std::span<const int64_t> sizes, double max_norm,
                               NormType norm_type, const std::function<void(const Tensor&)>& sum_over_ranks) {
  const char* op = "clip_sharded_grad_norm_";
  const cpu::NormPartial what = norm_type == NormType::kL2 ? cpu::NormPartial::kSumSquares : cpu::NormPartial::kMaxAbs;
  const std::vector<int64_t> offsets = norm_order::partial_offsets(sizes);
  Tensor partials = zeros({offsets.back()}, {.dtype = DType::kF64});
  double* out = partials.data<double>();
  for (const GradSlice& s : slices) {
    const Tensor& g = s.grad;
    MT_CHECK(s.param < sizes.size(), op, ": slice of parameter ", s.param, " but there are ", sizes.size());
    MT_CHECK(g.defined() && g.device().is_cpu() && g.is_contiguous() &&
                 (g.dtype() == DType::kF32 || g.dtype() == DType::kF64),
             op, ": a slice's grad must be a contiguous CPU f32 or f64 tensor");
    const int64_t end = s.begin + g.numel();
    MT_CHECK(s.begin >= 0 && end <= sizes[s.param] && s.begin % norm_order::kBlock == 0 &&
                 (end % norm_order::kBlock == 0 || end == sizes[s.param]),
             op, ": slice [", s.begin, ", ", end, ") of parameter ", s.param, " (", sizes[s.param],
             " elements) does not start and end on blocks of ", norm_order::kBlock);
    double* at = out + offsets[s.param] + s.begin / norm_order::kBlock;
    if (g.dtype() == DType::kF32) {
      cpu::norm_partials(g.data<float>(), g.numel(), what, at);
    } else {
      cpu::norm_partials(g.data<double>(), g.numel(), what, at);
    }
  }
  sum_over_ranks(partials);
  const double combined = cpu::combine_partials(out, offsets.back(), what);
  const double total = what == cpu::NormPartial::kSumSquares ? rn::sqrt(combined) : combined;
  const double coef = norm_order::clip_coefficient(total, max_norm);
  if (coef < 1.0) {
    for (const GradSlice& s : slices) {
      if (s.grad.dtype() == DType::kF32) {
        cpu::scale(s.grad.data<float>(), s.grad.numel(), coef);
      } else {
        cpu::scale(s.grad.data<double>(), s.grad.numel(), coef);
      }
    }
  }
  return scalar_tensor(total, {.dtype = DType::kF64});
}

// The enqueued rule and one read: the host waits for the total here.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, NormType norm_type) {
  return clip_grad_norm(params, max_norm, norm_type, "clip_grad_norm_").item();
}

double clip_grad_norm_(const std::vector<NamedTensor>& params, double max_norm, NormType norm_type) {
  return clip_grad_norm_(tensors_of(params), max_norm, norm_type);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  MT_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  for (const auto& g : grads_of(params, "clip_grad_value_")) {
    if (!g.device().is_cpu() || is_low_precision(g.dtype())) {
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
