// CUDA dropout: the keep-mask drawn from the Generator's own Philox stream (ops/cuda/philox.h: one thread
// per 4-word block, the same words as the CPU draws) fused with the scaled copy, and the masked scale the
// backward runs; kernels, launchers and the typed entries of ops/dropout/dropout.cc, which launch on the
// tensors' device's current stream.
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/cuda/philox.h"
#include "ops/dropout/dropout_cuda.h"

namespace mantissa::gpu {
namespace {

// Thread t owns stream block first_block + t: the elements whose word positions fall in it.
template <typename D>
__global__ void dropout_forward_kernel(uint64_t seed, uint64_t position, float keep, compute_t<D> scale,
                                       const D* __restrict__ x, bool* __restrict__ mask, D* __restrict__ out,
                                       int64_t n) {
  using C = compute_t<D>;
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
__global__ void dropout_apply_kernel(const D* __restrict__ x, const bool* __restrict__ mask, compute_t<D> scale,
                                     D* __restrict__ out, int64_t n) {
  using C = compute_t<D>;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = store<D>(mask[i] ? load(x[i]) * scale : C(0));
}

// mask[i] = uniform(word position + i of the seed's Philox stream) < keep; out[i] = mask ? x * scale : 0.
template <typename T>
void launch_dropout_forward(uint64_t seed, uint64_t position, float keep, double scale, const T* x, bool* mask, T* out,
                            int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  using C = compute_t<device_t<T>>;
  const int64_t blocks = static_cast<int64_t>((position + static_cast<uint64_t>(n) + 3) / 4 - position / 4);
  const LaunchGeometry g = elementwise_geometry(blocks);
  dropout_forward_kernel<<<g.blocks, g.threads, 0, stream>>>(seed, position, keep, static_cast<C>(scale), dev(x), mask,
                                                             dev(out), n);
  MT_CUDA_LAUNCH_CHECK("dropout_forward_kernel");
}

// out[i] = mask[i] ? x[i] * scale : 0 (the backward, on the gradient).
template <typename T>
void launch_dropout_apply(const T* x, const bool* mask, double scale, T* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  using C = compute_t<device_t<T>>;
  const LaunchGeometry g = elementwise_geometry(n);
  dropout_apply_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(x), mask, static_cast<C>(scale), dev(out), n);
  MT_CUDA_LAUNCH_CHECK("dropout_apply_kernel");
}

}  // namespace
}  // namespace mantissa::gpu

namespace mantissa {

void cuda_masked_scale(const Tensor& t, const Tensor& mask, double scale, const Tensor& out) {
  gpu::DeviceGuard guard(t.device());
  dispatch_floating(t.dtype(), "dropout", [&]<typename T>() {
    gpu::launch_dropout_apply<T>(t.data<T>(), mask.data<bool>(), scale, out.data<T>(), t.numel(),
                                 gpu::current_stream(t.device()));
  });
}

void cuda_dropout(const Tensor& x, float keep, double scale, Generator& gen, const Tensor& mask, const Tensor& out) {
  const GeneratorState state = gen.state();
  gen.set_state(gpu::advance(state, static_cast<uint64_t>(x.numel())));
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    gpu::launch_dropout_forward<T>(state.seed, gpu::stream_position(state), keep, scale, x.data<T>(), mask.data<bool>(),
                                   out.data<T>(), x.numel(), gpu::current_stream(x.device()));
  });
}

}  // namespace mantissa
