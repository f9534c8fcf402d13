// The CUDA side of ops/loss/loss.cc: per-position losses and logsumexps, the device-side reduction
// (ops/softmax/softmax_launch.h, ops/shape/index_launch.h), and the backward reading the count the forward left there.
#include "framework/cuda/stream.h"
#include "ops/loss/loss_cuda.h"
#include "ops/shape/index_launch.h"
#include "ops/softmax/softmax_launch.h"

namespace mantissa {
namespace {

RowGeometry rows_of(const cpu::ClassGeometry& g) { return {.outer = g.batch, .dim = g.classes, .inner = g.inner}; }

}  // namespace

cpu::ClassLossForward cuda_cross_entropy(const cpu::ClassPlan& p, CrossEntropyOptions options) {
  const DType dtype = p.input.dtype();
  const DType cd = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  const int64_t positions = p.geometry.positions();
  const Device device = p.input.device();
  Tensor loss = empty({positions}, {.dtype = cd, .device = device});
  cpu::ClassLossForward r;
  r.lse = empty({positions}, {.dtype = cd, .device = device});
  r.device_count = empty({}, {.dtype = DType::kF64, .device = device});
  r.out = empty(options.reduction == Reduction::kNone ? p.loss_shape : Shape{}, {.dtype = dtype, .device = device});
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  dispatch_floating(dtype, "cross_entropy", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_cross_entropy_forward<T, C>(rows_of(p.geometry), p.input.data<T>(), p.target.data<int64_t>(),
                                            options.ignore_index, loss.data<C>(), r.lse.data<C>(), stream);
    gpu::launch_loss_reduce<T, C>(positions, options.reduction, loss.data<C>(), p.target.data<int64_t>(),
                                  options.ignore_index, r.out.data<T>(), r.device_count.data<double>(), stream);
  });
  return r;
}

Tensor cuda_cross_entropy_backward(const Tensor& grad, const cpu::ClassLossSaved& s) {
  const Tensor& x = s.logits;
  const Tensor g = grad.to(x.dtype()).contiguous();
  Tensor dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "CrossEntropyBackward", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_cross_entropy_backward<T, C>(
        rows_of(s.geometry), s.options.reduction, x.data<T>(), s.target.data<int64_t>(), s.lse.data<C>(), g.data<T>(),
        s.device_count.data<double>(), s.options.ignore_index, dx.data<T>(), gpu::current_stream(x.device()));
  });
  return dx;
}

cpu::ClassLossForward cuda_nll_loss(const cpu::ClassPlan& p, CrossEntropyOptions options) {
  const DType dtype = p.input.dtype();
  const DType cd = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  const int64_t positions = p.geometry.positions();
  const Device device = p.input.device();
  Tensor loss = empty({positions}, {.dtype = cd, .device = device});
  cpu::ClassLossForward r;
  r.device_count = empty({}, {.dtype = DType::kF64, .device = device});
  r.out = empty(options.reduction == Reduction::kNone ? p.loss_shape : Shape{}, {.dtype = dtype, .device = device});
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  dispatch_floating(dtype, "nll_loss", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_nll_forward<T, C>(p.input.data<T>(), p.target.data<int64_t>(), p.geometry.batch, p.geometry.classes,
                                  p.geometry.inner, options.ignore_index, loss.data<C>(), stream);
    gpu::launch_loss_reduce<T, C>(positions, options.reduction, loss.data<C>(), p.target.data<int64_t>(),
                                  options.ignore_index, r.out.data<T>(), r.device_count.data<double>(), stream);
  });
  return r;
}

Tensor cuda_nll_loss_backward(const Tensor& grad, const cpu::ClassLossSaved& s) {
  const Tensor g = grad.to(s.input_dtype).contiguous();
  Tensor dx = empty(s.input_shape, {.dtype = s.input_dtype, .device = g.device()});
  gpu::DeviceGuard guard(g.device());
  dispatch_floating(s.input_dtype, "NllLossBackward", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_nll_backward<T, C>(s.target.data<int64_t>(), g.data<T>(), s.device_count.data<double>(),
                                   s.options.reduction, s.geometry.batch, s.geometry.classes, s.geometry.inner,
                                   s.options.ignore_index, dx.data<T>(), gpu::current_stream(g.device()));
  });
  return dx;
}

}  // namespace mantissa
