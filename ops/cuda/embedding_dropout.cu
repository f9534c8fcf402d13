// CUDA embedding (row gather; backward by f32 atomic adds into a zeroed table) and dropout, whose mask
// comes from the Generator's own Philox stream (ops/cuda/philox.h): one thread per 4-word block.
#include "framework/cuda/check.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/embedding_dropout.h"
#include "ops/cuda/offset_calc.h"
#include "ops/cuda/philox.h"

namespace mantissa::gpu {
namespace {

template <typename D>
__global__ void embedding_forward_kernel(const D* __restrict__ w, const int64_t* __restrict__ idx, int64_t n,
                                         int64_t vocab, int64_t width, D* __restrict__ out) {
  for (int64_t e = global_thread(); e < n * width; e += grid_threads()) {
    const int64_t i = e / width, j = e - i * width;
    const int64_t row = idx[i];
    out[e] = row >= 0 && row < vocab ? w[row * width + j] : store<D>(acc_t<D>(NAN));
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

// Thread t owns stream block first_block + t: the elements whose word positions fall in it.
template <typename D>
__global__ void dropout_forward_kernel(uint64_t seed, uint64_t position, float keep, acc_t<D> scale,
                                       const D* __restrict__ x, bool* __restrict__ mask, D* __restrict__ out,
                                       int64_t n) {
  using C = acc_t<D>;
  const uint64_t first_block = position / 4;
  const int64_t blocks = static_cast<int64_t>((position + static_cast<uint64_t>(n) + 3) / 4 - first_block);
  for (int64_t t = global_thread(); t < blocks; t += grid_threads()) {
    const uint64_t block = first_block + static_cast<uint64_t>(t);
    const Philox4 r = generator_block(seed, block);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = static_cast<int64_t>(block * 4 + k - position);  // element of this word
      if (block * 4 + k < position || i >= n) continue;
      const bool m = uniform_from_word(r.v[k]) < keep;
      mask[i] = m;
      out[i] = store<D>(m ? load(x[i]) * scale : C(0));
    }
  }
}

template <typename D>
__global__ void dropout_apply_kernel(const D* __restrict__ x, const bool* __restrict__ mask, acc_t<D> scale,
                                     D* __restrict__ out, int64_t n) {
  using C = acc_t<D>;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = store<D>(mask[i] ? load(x[i]) * scale : C(0));
}

}  // namespace

template <typename T>
void launch_embedding_forward(const T* weight, const int64_t* indices, int64_t n, int64_t vocab, int64_t width, T* out,
                              cudaStream_t stream) {
  if (n * width == 0) return;
  const LaunchGeometry g = elementwise_geometry(n * width);
  embedding_forward_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(weight), indices, n, vocab, width, dev(out));
  MT_CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

template <typename T, typename A>
void launch_embedding_backward(const T* grad, const int64_t* indices, int64_t n, int64_t vocab, int64_t width, A* acc,
                               cudaStream_t stream) {
  if (n * width == 0) return;
  const LaunchGeometry g = elementwise_geometry(n * width);
  embedding_backward_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(grad), indices, n, vocab, width, acc);
  MT_CUDA_LAUNCH_CHECK("embedding_backward_kernel");
}

template <typename T>
void launch_dropout_forward(uint64_t seed, uint64_t position, float keep, double scale, const T* x, bool* mask, T* out,
                            int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  using C = acc_t<device_t<T>>;
  const int64_t blocks = static_cast<int64_t>((position + static_cast<uint64_t>(n) + 3) / 4 - position / 4);
  const LaunchGeometry g = elementwise_geometry(blocks);
  dropout_forward_kernel<<<g.blocks, g.threads, 0, stream>>>(seed, position, keep, static_cast<C>(scale), dev(x), mask,
                                                             dev(out), n);
  MT_CUDA_LAUNCH_CHECK("dropout_forward_kernel");
}

template <typename T>
void launch_dropout_apply(const T* x, const bool* mask, double scale, T* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  using C = acc_t<device_t<T>>;
  const LaunchGeometry g = elementwise_geometry(n);
  dropout_apply_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(x), mask, static_cast<C>(scale), dev(out), n);
  MT_CUDA_LAUNCH_CHECK("dropout_apply_kernel");
}

#define MT_INSTANTIATE(T, A)                                                                                        \
  template void launch_embedding_forward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*, cudaStream_t); \
  template void launch_embedding_backward<T, A>(const T*, const int64_t*, int64_t, int64_t, int64_t, A*,            \
                                                cudaStream_t);                                                      \
  template void launch_dropout_forward<T>(uint64_t, uint64_t, float, double, const T*, bool*, T*, int64_t,          \
                                          cudaStream_t);                                                            \
  template void launch_dropout_apply<T>(const T*, const bool*, double, T*, int64_t, cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(double, double)
MT_INSTANTIATE(Half, float)
MT_INSTANTIATE(BFloat16, float)
#undef MT_INSTANTIATE

}  // namespace mantissa::gpu
