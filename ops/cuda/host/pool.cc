// The CUDA side of ops/pool.cc: launches on the tensors' device's current stream.
#include "ops/cuda/host/pool.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/pool.h"

namespace mantissa {

void cuda_max_pool2d(const cpu::Pool2dGeometry& g, const Tensor& x, const Tensor& out, const Tensor& indices) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "max_pool2d", [&]<typename T>() {
    gpu::launch_max_pool2d_forward<T>(g, x.data<T>(), out.data<T>(), indices.data<int64_t>(),
                                      gpu::current_stream(x.device()));
  });
}

void cuda_max_pool2d_backward(const cpu::Pool2dGeometry& g, const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  gpu::DeviceGuard guard(dy.device());
  dispatch_floating(dx.dtype(), "max_pool2d_backward", [&]<typename T>() {
    gpu::launch_max_pool2d_backward<T>(g, dy.data<T>(), indices.data<int64_t>(), dx.data<T>(),
                                       gpu::current_stream(dy.device()));
  });
}

void cuda_avg_pool2d(const cpu::Pool2dGeometry& g, const Tensor& x, const Tensor& out) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<typename T>() {
    gpu::launch_avg_pool2d_forward<T>(g, x.data<T>(), out.data<T>(), gpu::current_stream(x.device()));
  });
}

void cuda_avg_pool2d_backward(const cpu::Pool2dGeometry& g, const Tensor& dy, const Tensor& dx) {
  gpu::DeviceGuard guard(dy.device());
  dispatch_floating(dx.dtype(), "avg_pool2d_backward", [&]<typename T>() {
    gpu::launch_avg_pool2d_backward<T>(g, dy.data<T>(), dx.data<T>(), gpu::current_stream(dy.device()));
  });
}

}  // namespace mantissa
