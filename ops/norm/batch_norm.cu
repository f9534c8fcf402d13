// CUDA batch_norm: batch statistics and the backward with a block per channel (two passes over the
// channel's n * spatial values, sums in the compute type as the CPU, in another order), the running-
// statistics update and invstd in f64 on the device, and the normalization as a grid-stride elementwise
// kernel. Per-element formulas are in ops/cuda/cnn_math.h.
#include "framework/cuda/check.h"
#include "ops/cuda/cnn_math.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/norm/batch_norm_launch.h"

namespace mantissa::gpu {
namespace {

constexpr int kChannelThreads = 256;

// Value e (< n * spatial) of channel c: element (e / spatial, c, e % spatial).
__device__ __forceinline__ int64_t channel_offset(const cpu::BatchNormGeometry& g, int64_t c, int64_t e) {
  const int64_t i = e / g.spatial;
  return (i * g.channels + c) * g.spatial + (e - i * g.spatial);
}

template <typename D, typename P>
__global__ void batch_norm_stats_kernel(cpu::BatchNormGeometry g, double eps, double momentum, const D* __restrict__ x,
                                        P* __restrict__ running_mean, P* __restrict__ running_var, P* __restrict__ mean,
                                        P* __restrict__ invstd) {
  __shared__ P scratch[32];
  const int64_t c = blockIdx.x, m = g.n * g.spatial;
  P s = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) s += static_cast<P>(load(x[channel_offset(g, c, e)]));
  const P mu = block_sum(s, scratch) / static_cast<P>(m);
  P ss = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const P d = static_cast<P>(load(x[channel_offset(g, c, e)])) - mu;
    ss += mul_rn(d, d);
  }
  const P var = block_sum(ss, scratch) / static_cast<P>(m);
  if (threadIdx.x == 0) {
    mean[c] = mu;
    invstd[c] = static_cast<P>(bn_invstd(static_cast<double>(var), eps));
    if (running_mean) {
      running_mean[c] = static_cast<P>(bn_running_update(static_cast<double>(running_mean[c]), mu, momentum));
      running_var[c] = static_cast<P>(
          bn_running_update(static_cast<double>(running_var[c]), bn_unbiased(static_cast<double>(var), m), momentum));
    }
  }
}

template <typename P>
__global__ void batch_norm_eval_stats_kernel(int64_t channels, double eps, const P* __restrict__ running_mean,
                                             const P* __restrict__ running_var, P* __restrict__ mean,
                                             P* __restrict__ invstd) {
  for (int64_t c = global_thread(); c < channels; c += grid_threads()) {
    mean[c] = running_mean[c];
    invstd[c] = static_cast<P>(bn_invstd(static_cast<double>(running_var[c]), eps));
  }
}

template <typename D, typename P>
__global__ void batch_norm_apply_kernel(cpu::BatchNormGeometry g, const D* __restrict__ x, const P* __restrict__ mean,
                                        const P* __restrict__ invstd, const P* __restrict__ w, const P* __restrict__ b,
                                        D* __restrict__ y) {
  const int64_t total = g.n * g.channels * g.spatial;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t c = (e / g.spatial) % g.channels;
    const P v = static_cast<P>(load(x[e]));
    y[e] = store<D>(bn_apply<P>(v, mean[c], invstd[c], w ? w[c] : P(1), b ? b[c] : P(0)));
  }
}

template <typename D, typename P>
__global__ void batch_norm_backward_kernel(cpu::BatchNormGeometry g, bool from_batch, const D* __restrict__ dy,
                                           const D* __restrict__ x, const P* __restrict__ mean,
                                           const P* __restrict__ invstd, const P* __restrict__ w, D* __restrict__ dx,
                                           P* __restrict__ dw, P* __restrict__ db) {
  __shared__ P scratch[32];
  const int64_t c = blockIdx.x, m = g.n * g.spatial;
  const P mu = mean[c], is = invstd[c];
  P s_dy = 0, s_dy_xhat = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const int64_t at = channel_offset(g, c, e);
    const P d = static_cast<P>(load(dy[at]));
    s_dy += d;
    s_dy_xhat += bn_dy_xhat<P>(d, static_cast<P>(load(x[at])), mu, is);
  }
  const P sum_dy = block_sum(s_dy, scratch);
  const P sum_dy_xhat = block_sum(s_dy_xhat, scratch);
  if (threadIdx.x == 0) {
    if (dw) dw[c] = sum_dy_xhat;
    if (db) db[c] = sum_dy;
  }
  if (!dx) return;
  const P scale = (w ? w[c] : P(1)) * is;
  const P mean_dy = from_batch ? sum_dy / static_cast<P>(m) : P(0);
  const P mean_dy_xhat = from_batch ? sum_dy_xhat / static_cast<P>(m) : P(0);
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const int64_t at = channel_offset(g, c, e);
    dx[at] = store<D>(bn_input_grad<P>(static_cast<P>(load(dy[at])), static_cast<P>(load(x[at])), mu, is, scale,
                                       mean_dy, mean_dy_xhat));
  }
}

}  // namespace

template <typename T>
void launch_batch_norm_stats(const cpu::BatchNormGeometry& g, double eps, double momentum, const T* x,
                             param_t<T>* running_mean, param_t<T>* running_var, param_t<T>* mean, param_t<T>* invstd,
                             cudaStream_t stream) {
  if (g.channels == 0) return;
  batch_norm_stats_kernel<<<static_cast<unsigned>(g.channels), kChannelThreads, 0, stream>>>(
      g, eps, momentum, dev(x), running_mean, running_var, mean, invstd);
  MT_CUDA_LAUNCH_CHECK("batch_norm_stats_kernel");
}

template <typename T>
void launch_batch_norm_eval_stats(int64_t channels, double eps, const param_t<T>* running_mean,
                                  const param_t<T>* running_var, param_t<T>* mean, param_t<T>* invstd,
                                  cudaStream_t stream) {
  if (channels == 0) return;
  const LaunchGeometry lg = elementwise_geometry(channels);
  batch_norm_eval_stats_kernel<<<lg.blocks, lg.threads, 0, stream>>>(channels, eps, running_mean, running_var, mean,
                                                                     invstd);
  MT_CUDA_LAUNCH_CHECK("batch_norm_eval_stats_kernel");
}

template <typename T>
void launch_batch_norm_apply(const cpu::BatchNormGeometry& g, const T* x, const param_t<T>* mean,
                             const param_t<T>* invstd, const param_t<T>* w, const param_t<T>* b, T* y,
                             cudaStream_t stream) {
  const int64_t total = g.n * g.channels * g.spatial;
  if (total == 0) return;
  const LaunchGeometry lg = elementwise_geometry(total);
  batch_norm_apply_kernel<<<lg.blocks, lg.threads, 0, stream>>>(g, dev(x), mean, invstd, w, b, dev(y));
  MT_CUDA_LAUNCH_CHECK("batch_norm_apply_kernel");
}

template <typename T>
void launch_batch_norm_backward(const cpu::BatchNormGeometry& g, cpu::BatchStats stats, const T* dy, const T* x,
                                const param_t<T>* mean, const param_t<T>* invstd, const param_t<T>* w, T* dx,
                                param_t<T>* dw, param_t<T>* db, cudaStream_t stream) {
  if (g.channels == 0 || (!dx && !dw && !db)) return;
  batch_norm_backward_kernel<<<static_cast<unsigned>(g.channels), kChannelThreads, 0, stream>>>(
      g, stats == cpu::BatchStats::kFromBatch, dev(dy), dev(x), mean, invstd, w, dev(dx), dw, db);
  MT_CUDA_LAUNCH_CHECK("batch_norm_backward_kernel");
}

#define MT_INSTANTIATE(T)                                                                                              \
  template void launch_batch_norm_stats<T>(const cpu::BatchNormGeometry&, double, double, const T*, param_t<T>*,       \
                                           param_t<T>*, param_t<T>*, param_t<T>*, cudaStream_t);                       \
  template void launch_batch_norm_eval_stats<T>(int64_t, double, const param_t<T>*, const param_t<T>*, param_t<T>*,    \
                                                param_t<T>*, cudaStream_t);                                            \
  template void launch_batch_norm_apply<T>(const cpu::BatchNormGeometry&, const T*, const param_t<T>*,                 \
                                           const param_t<T>*, const param_t<T>*, const param_t<T>*, T*, cudaStream_t); \
  template void launch_batch_norm_backward<T>(const cpu::BatchNormGeometry&, cpu::BatchStats, const T*, const T*,      \
                                              const param_t<T>*, const param_t<T>*, const param_t<T>*, T*,             \
                                              param_t<T>*, param_t<T>*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
MT_INSTANTIATE(Half)
MT_INSTANTIATE(BFloat16)
#undef MT_INSTANTIATE

}  // namespace mantissa::gpu
