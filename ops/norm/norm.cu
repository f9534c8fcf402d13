// The CUDA side of ops/norm/norm.cc: launches of ops/norm/layer_norm.cu and ops/norm/batch_norm.cu on the tensors'
// device's current stream.
#include "framework/autograd.h"
#include "framework/cuda/stream.h"
#include "ops/norm/batch_norm_launch.h"
#include "ops/norm/layer_norm_launch.h"
#include "ops/norm/norm_cuda.h"
#include "ops/norm/norm_tensors.h"

namespace mantissa {
namespace {

using norm_tensors::compute_dtype;
using norm_tensors::ptr_or_null;
using norm_tensors::widened;

}  // namespace

void cuda_layer_norm(const cpu::LayerNormGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                     const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "layer_norm", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_layer_norm_forward<T>(g.rows, g.cols, g.eps, x.data<T>(), ptr_or_null<C>(w), ptr_or_null<C>(b),
                                      out.data<T>(), mean.data<C>(), rstd.data<C>(), gpu::current_stream(x.device()));
  });
}

void cuda_layer_norm_backward(const cpu::LayerNormGeometry& g, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& w, const Tensor& dx, const Tensor& dw,
                              const Tensor& db) {
  gpu::DeviceGuard guard(x.device());
  const cudaStream_t stream = gpu::current_stream(x.device());
  const int64_t slices = gpu::layer_norm_param_slices(g.rows, g.cols, x.device().index);
  const Tensor workspace = (dw.defined() || db.defined()) && slices > 1
                               ? empty({2 * slices * g.cols}, {.dtype = compute_dtype(x.dtype()), .device = x.device()})
                               : Tensor();
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using C = compute_t<T>;
    if (dx.defined()) {
      gpu::launch_layer_norm_backward_input<T>(g.rows, g.cols, dy.data<T>(), x.data<T>(), mean.data<C>(),
                                               rstd.data<C>(), ptr_or_null<C>(w), dx.data<T>(), stream);
    }
    gpu::launch_layer_norm_backward_params<T>(g.rows, g.cols, slices, dy.data<T>(), x.data<T>(), mean.data<C>(),
                                              rstd.data<C>(), ptr_or_null<C>(workspace), ptr_or_null<C>(dw),
                                              ptr_or_null<C>(db), stream);
  });
}

// Running statistics are read and updated in the compute dtype: in place when they already are
// contiguous tensors of it, else through a widened copy written back.
void cuda_batch_norm_stats(const Tensor& xc, const cpu::BatchNormGeometry& g, BatchNormMode mode,
                           const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                           const Tensor& mean, const Tensor& invstd) {
  const DType cd = compute_dtype(xc.dtype());
  const Tensor rm = running_mean.defined() ? widened(running_mean, cd) : Tensor();
  const Tensor rv = running_var.defined() ? widened(running_var, cd) : Tensor();
  gpu::DeviceGuard guard(xc.device());
  const cudaStream_t stream = gpu::current_stream(xc.device());
  dispatch_floating(xc.dtype(), "batch_norm", [&]<typename T>() {
    using C = compute_t<T>;
    if (mode == BatchNormMode::kTrain) {
      gpu::launch_batch_norm_stats<T>(g, eps, momentum, xc.data<T>(), ptr_or_null<C>(rm), ptr_or_null<C>(rv),
                                      mean.data<C>(), invstd.data<C>(), stream);
    } else {
      gpu::launch_batch_norm_eval_stats<T>(g.channels, eps, rm.data<C>(), rv.data<C>(), mean.data<C>(),
                                           invstd.data<C>(), stream);
    }
  });
  if (mode == BatchNormMode::kTrain && rm.defined()) {
    NoGradGuard no_grad;
    if (rm.data_ptr() != running_mean.data_ptr()) copy_(running_mean, rm);
    if (rv.data_ptr() != running_var.data_ptr()) copy_(running_var, rv);
  }
}

void cuda_batch_norm_apply(const cpu::BatchNormGeometry& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                           const Tensor& w, const Tensor& b, const Tensor& out) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_batch_norm_apply<T>(g, x.data<T>(), mean.data<C>(), invstd.data<C>(), ptr_or_null<C>(w),
                                    ptr_or_null<C>(b), out.data<T>(), gpu::current_stream(x.device()));
  });
}

void cuda_batch_norm_backward(const cpu::BatchNormGeometry& g, cpu::BatchStats stats, const Tensor& dy, const Tensor& x,
                              const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& dx,
                              const Tensor& dw, const Tensor& db) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_batch_norm_backward<T>(g, stats, dy.data<T>(), x.data<T>(), mean.data<C>(), invstd.data<C>(),
                                       ptr_or_null<C>(w), ptr_or_null<T>(dx), ptr_or_null<C>(dw), ptr_or_null<C>(db),
                                       gpu::current_stream(x.device()));
  });
}

}  // namespace mantissa
