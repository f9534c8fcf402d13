// The CUDA side of ops/softmax.cc: the [outer, dim, inner] rows and the launches on the tensors'
// device's current stream.
#include "ops/cuda/host/softmax.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/softmax.h"

namespace mantissa {
namespace {

gpu::RowGeometry rows_of(const Shape& shape, int64_t dim) {
  const cpu::SoftmaxGeometry g = cpu::softmax_geometry(shape, dim);
  return {.outer = g.outer, .dim = g.dim, .inner = g.inner};
}
gpu::SoftmaxMode mode_of(cpu::SoftmaxKind kind) {
  return kind == cpu::SoftmaxKind::kSoftmax ? gpu::SoftmaxMode::kSoftmax : gpu::SoftmaxMode::kLogSoftmax;
}

}  // namespace

void cuda_softmax(const Tensor& x, const Tensor& y, int64_t dim, cpu::SoftmaxKind kind) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), kind == cpu::SoftmaxKind::kSoftmax ? "softmax" : "log_softmax", [&]<typename T>() {
    gpu::launch_softmax_forward<T>(rows_of(x.shape(), dim), mode_of(kind), x.data<T>(), y.data<T>(),
                                   gpu::current_stream(x.device()));
  });
}

void cuda_softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, int64_t dim, cpu::SoftmaxKind kind) {
  gpu::DeviceGuard guard(y.device());
  dispatch_floating(y.dtype(), kind == cpu::SoftmaxKind::kSoftmax ? "SoftmaxBackward" : "LogSoftmaxBackward",
                    [&]<typename T>() {
                      gpu::launch_softmax_backward<T>(rows_of(y.shape(), dim), mode_of(kind), dy.data<T>(), y.data<T>(),
                                                      dx.data<T>(), gpu::current_stream(y.device()));
                    });
}

}  // namespace mantissa
