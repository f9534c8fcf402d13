// CUDA embedding: the row gather (an index outside the table gives a NaN row; the CPU entry validates
// first) and its backward by atomic adds into a zeroed f32 (f64) table; kernels, launchers and the typed
// entries of ops/embedding/embedding.cc, which launch on the tensors' device's current stream.
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/embedding/embedding_cuda.h"

namespace mantissa::gpu {
namespace {

template <typename D>
__global__ void embedding_forward_kernel(const D* __restrict__ w, const int64_t* __restrict__ idx, int64_t n,
                                         int64_t vocab, int64_t width, D* __restrict__ out) {
  for (int64_t e = global_thread(); e < n * width; e += grid_threads()) {
    const int64_t i = e / width, j = e - i * width;
    const int64_t row = idx[i];
    out[e] = row >= 0 && row < vocab ? w[row * width + j] : store<D>(compute_t<D>(NAN));
  }
}

template <typename D, typename A>
__global__ void embedding_backward_kernel(const D* __restrict__ g, const int64_t* __restrict__ idx, int64_t n,
                                          int64_t vocab, int64_t width, A* __restrict__ acc) {
  for (int64_t e = global_thread(); e < n * width; e += grid_threads()) {
    const int64_t i = e / width, j = e - i * width;
    const int64_t row = idx[i];
    if (row >= 0 && row < vocab) atomicAdd(acc + row * width + j, static_cast<A>(load(g[e])));
  }
}

// out[i, :] = weight[indices[i], :] for n indices into a [vocab, width] table; an index outside
// [0, vocab) gives a NaN row (the device cannot throw; the CPU path validates).
template <typename T>
void launch_embedding_forward(const T* weight, const int64_t* indices, int64_t n, int64_t vocab, int64_t width, T* out,
                              cudaStream_t stream) {
  if (n * width == 0) return;
  const LaunchGeometry g = elementwise_geometry(n * width);
  embedding_forward_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(weight), indices, n, vocab, width, dev(out));
  MT_CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

// acc[indices[i], :] += grad[i, :] with atomic adds in A (order-dependent in the last bits); rows of
// out-of-range indices are dropped. acc must start zeroed.
template <typename T, typename A>
void launch_embedding_backward(const T* grad, const int64_t* indices, int64_t n, int64_t vocab, int64_t width, A* acc,
                               cudaStream_t stream) {
  if (n * width == 0) return;
  const LaunchGeometry g = elementwise_geometry(n * width);
  embedding_backward_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(grad), indices, n, vocab, width, acc);
  MT_CUDA_LAUNCH_CHECK("embedding_backward_kernel");
}

}  // namespace
}  // namespace mantissa::gpu

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
