// The CUDA side of ops/conv.cc.
#include "ops/cuda/host/conv.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/conv.h"

namespace mantissa {

void cuda_conv2d(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out) {
  const int d = x.device().index;
  dispatch_floating(x.dtype(), "conv2d", [&]<typename T>() {
    gpu::conv2d_forward<T>(g, x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr, out.data<T>(), d,
                           gpu::current_stream(d));
  });
}

void cuda_conv2d_backward(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const int d = dy.device().index;
  const cudaStream_t stream = gpu::current_stream(d);
  dispatch_floating(dy.dtype(), "conv2d_backward", [&]<typename T>() {
    if (dx.defined()) gpu::conv2d_backward_data<T>(g, dy.data<T>(), w.data<T>(), dx.data<T>(), d, stream);
    if (dw.defined()) gpu::conv2d_backward_filter<T>(g, x.data<T>(), dy.data<T>(), dw.data<T>(), d, stream);
    if (db.defined()) gpu::conv2d_backward_bias<T>(g, dy.data<T>(), db.data<T>(), d, stream);
  });
}

}  // namespace mantissa
