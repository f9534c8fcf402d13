// clip_grad_norm_ and clip_grad_value_: CPU grads through optim/cpu/optim_kernels.cc; for GPU grads the norm
// through optim/cuda/clip_kernels.cu, the value clamp through the ops.
#include "optim/clip_grad.h"

#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "optim/cpu/optim_kernels.h"
#include "optim/norm_order.h"
#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "optim/cuda/clip_kernels.h"
#endif

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

// CPU grads: the partials of all the grads into one list, combined in norm_order's order.
Tensor clip_grad_norm_cpu(const std::vector<Tensor>& grads, double max_norm, cpu::NormPartial what) {
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

#ifdef MANTISSA_WITH_CUDA
// GPU grads: three steps on the current stream, none read on the host: the partials of the f32 grads and
// of the f64 grads (one multi-tensor pass each) into one workspace at the grads' offsets, one block that
// combines them into the total and the coefficient, and one scaling pass per dtype that reads the
// coefficient and returns at once unless it is below 1. Two allocations per call, whatever the number of
// grads: the workspace (the coefficient, then the partials) and the returned total.
Tensor clip_grad_norm_cuda(const std::vector<Tensor>& grads, double max_norm, cpu::NormPartial what) {
  const Device device = grads.front().device();
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  std::vector<int64_t> sizes;
  for (const auto& g : grads) sizes.push_back(g.numel());
  const std::vector<int64_t> offsets = norm_order::partial_offsets(sizes);
  Tensor work = empty({1 + offsets.back()}, {.dtype = DType::kF64, .device = device});
  Tensor total = empty({}, {.dtype = DType::kF64, .device = device});
  double* coef = work.data<double>();
  double* partials = coef + 1;
  struct List {
    std::vector<void*> grads;
    std::vector<int64_t> sizes;
    std::vector<double*> partials;
  };
  List f32, f64;
  for (size_t i = 0; i < grads.size(); ++i) {
    List& list = grads[i].dtype() == DType::kF32 ? f32 : f64;
    list.grads.push_back(grads[i].data_ptr());
    list.sizes.push_back(sizes[i]);
    list.partials.push_back(partials + offsets[i]);
  }
  gpu::norm_partials(f32.grads, f32.sizes, f32.partials, gpu::ClipDType::kF32, what, stream);
  gpu::norm_partials(f64.grads, f64.sizes, f64.partials, gpu::ClipDType::kF64, what, stream);
  gpu::combine_partials(partials, offsets.back(), what, max_norm, total.data<double>(), coef, stream);
  gpu::scale_by_coefficient(f32.grads, f32.sizes, gpu::ClipDType::kF32, coef, stream);
  gpu::scale_by_coefficient(f64.grads, f64.sizes, gpu::ClipDType::kF64, coef, stream);
  return total;
}
#endif

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, NormType norm_type, const char* op) {
  const std::vector<Tensor> grads = grads_of(params, op);
  const cpu::NormPartial what = norm_type == NormType::kL2 ? cpu::NormPartial::kSumSquares : cpu::NormPartial::kMaxAbs;
  if (grads.empty()) return scalar_tensor(0.0, {.dtype = DType::kF64});  // the norm of nothing
  const Device device = grads.front().device();
  if (device.is_cpu()) return clip_grad_norm_cpu(grads, max_norm, what);
#ifdef MANTISSA_WITH_CUDA
  if (device.is_cuda()) return clip_grad_norm_cuda(grads, max_norm, what);
#endif
  MT_THROW(op, ": no kernel for grads on ", device.str(), " in this build");
}

}  // namespace

Tensor enqueue_clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, NormType norm_type) {
  return clip_grad_norm(params, max_norm, norm_type, "enqueue_clip_grad_norm_");
}

Tensor enqueue_clip_grad_norm_(const std::vector<NamedTensor>& params, double max_norm, NormType norm_type) {
  return enqueue_clip_grad_norm_(tensors_of(params), max_norm, norm_type);
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
