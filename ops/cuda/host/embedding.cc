// The CUDA side of ops/embedding.cc: launches on the tensors' device's current stream.
#include "ops/cuda/host/embedding.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/embedding_dropout.h"

namespace mantissa {

void cuda_embedding(const Tensor& weight, const Tensor& idx, const Tensor& out) {
  gpu::DeviceGuard guard(weight.device());
  dispatch_floating(weight.dtype(), "embedding", [&]<typename T>() {
    gpu::launch_embedding_forward<T>(weight.data<T>(), idx.data<int64_t>(), idx.numel(), weight.size(0), weight.size(1),
                                     out.data<T>(), gpu::current_stream(weight.device()));
  });
}

Tensor cuda_embedding_backward(const Tensor& g, const Tensor& idx, const Shape& weight_shape, DType weight_dtype) {
  return dispatch_floating(weight_dtype, "EmbeddingBackward", [&]<typename T>() {
    using C = compute_t<T>;
    Tensor acc = zeros(weight_shape, {.dtype = dtype_v<C>, .device = g.device()});
    gpu::DeviceGuard guard(g.device());
    gpu::launch_embedding_backward<T, C>(g.data<T>(), idx.data<int64_t>(), idx.numel(), weight_shape[0],
                                         weight_shape[1], acc.data<C>(), gpu::current_stream(g.device()));
    return acc.to(weight_dtype);
  });
}

}  // namespace mantissa
