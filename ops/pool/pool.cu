// CUDA max_pool2d and avg_pool2d: forward with a thread per output, backward as a gather with a thread
// per input (no atomics: each input adds the outputs covering it in output order, as the CPU's scatter
// does), so every result equals the CPU's bit for bit. Window math is in ops/cuda/cnn_math.h.
#include <cuda_runtime_api.h>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/cnn_math.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/pool/pool_cpu.h"
#include "ops/pool/pool_cuda.h"

namespace mantissa::gpu {
namespace {

template <typename D>
__global__ void max_pool_forward_kernel(cpu::Pool2dGeometry g, const D* __restrict__ x, D* __restrict__ y,
                                        int64_t* __restrict__ argmax) {
  using C = compute_t<D>;
  const int64_t outs = g.oh * g.ow, total = g.planes * outs;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t pl = e / outs, o = e - pl * outs, oy = o / g.ow, ox = o - oy * g.ow;
    const D* xp = x + pl * g.h * g.w;
    const int64_t best = max_pool_argmax<C>(g, oy, ox, [&](int64_t i) { return static_cast<C>(load(xp[i])); });
    y[e] = xp[best];  // the stored value itself
    argmax[e] = best;
  }
}

template <typename D>
__global__ void max_pool_backward_kernel(cpu::Pool2dGeometry g, const D* __restrict__ dy,
                                         const int64_t* __restrict__ argmax, D* __restrict__ dx) {
  using C = compute_t<D>;
  const int64_t ins = g.h * g.w, outs = g.oh * g.ow, total = g.planes * ins;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t pl = e / ins, i = e - pl * ins, iy = i / g.w, ix = i - iy * g.w;
    const D* dyp = dy + pl * outs;
    const int64_t* ip = argmax + pl * outs;
    const C acc = max_pool_input_grad<C>(
        g, iy, ix, [&](int64_t o) { return static_cast<C>(load(dyp[o])); }, [&](int64_t o) { return ip[o]; });
    dx[e] = store<D>(acc);
  }
}

template <typename D>
__global__ void avg_pool_forward_kernel(cpu::Pool2dGeometry g, const D* __restrict__ x, D* __restrict__ y) {
  using C = compute_t<D>;
  const int64_t outs = g.oh * g.ow, total = g.planes * outs;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t pl = e / outs, o = e - pl * outs, oy = o / g.ow, ox = o - oy * g.ow;
    const D* xp = x + pl * g.h * g.w;
    y[e] = store<D>(avg_pool_value<C>(g, oy, ox, [&](int64_t i) { return static_cast<C>(load(xp[i])); }));
  }
}

template <typename D>
__global__ void avg_pool_backward_kernel(cpu::Pool2dGeometry g, const D* __restrict__ dy, D* __restrict__ dx) {
  using C = compute_t<D>;
  const int64_t ins = g.h * g.w, outs = g.oh * g.ow, total = g.planes * ins;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t pl = e / ins, i = e - pl * ins, iy = i / g.w, ix = i - iy * g.w;
    const D* dyp = dy + pl * outs;
    dx[e] = store<D>(avg_pool_input_grad<C>(g, iy, ix, [&](int64_t o) { return static_cast<C>(load(dyp[o])); }));
  }
}

}  // namespace

// y and argmax (plane index of the first maximum, as the CPU), a thread per output.
template <typename T>
void launch_max_pool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, int64_t* argmax, cudaStream_t stream) {
  const int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return;
  const LaunchGeometry lg = elementwise_geometry(total);
  max_pool_forward_kernel<<<lg.blocks, lg.threads, 0, stream>>>(g, dev(x), dev(y), argmax);
  MT_CUDA_CHECK(cudaGetLastError());
}

// dx (every element written) gathers dy from the outputs whose argmax it is, a thread per input.
template <typename T>
void launch_max_pool2d_backward(const cpu::Pool2dGeometry& g, const T* dy, const int64_t* argmax, T* dx,
                                cudaStream_t stream) {
  const int64_t total = g.planes * g.h * g.w;
  if (total == 0) return;
  const LaunchGeometry lg = elementwise_geometry(total);
  max_pool_backward_kernel<<<lg.blocks, lg.threads, 0, stream>>>(g, dev(dy), argmax, dev(dx));
  MT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_avg_pool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, cudaStream_t stream) {
  const int64_t total = g.planes * g.oh * g.ow;
  if (total == 0) return;
  const LaunchGeometry lg = elementwise_geometry(total);
  avg_pool_forward_kernel<<<lg.blocks, lg.threads, 0, stream>>>(g, dev(x), dev(y));
  MT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_avg_pool2d_backward(const cpu::Pool2dGeometry& g, const T* dy, T* dx, cudaStream_t stream) {
  const int64_t total = g.planes * g.h * g.w;
  if (total == 0) return;
  const LaunchGeometry lg = elementwise_geometry(total);
  avg_pool_backward_kernel<<<lg.blocks, lg.threads, 0, stream>>>(g, dev(dy), dev(dx));
  MT_CUDA_CHECK(cudaGetLastError());
}

#define MT_INSTANTIATE(T)                                                                                              \
  template void launch_max_pool2d_forward<T>(const cpu::Pool2dGeometry&, const T*, T*, int64_t*, cudaStream_t);        \
  template void launch_max_pool2d_backward<T>(const cpu::Pool2dGeometry&, const T*, const int64_t*, T*, cudaStream_t); \
  template void launch_avg_pool2d_forward<T>(const cpu::Pool2dGeometry&, const T*, T*, cudaStream_t);                  \
  template void launch_avg_pool2d_backward<T>(const cpu::Pool2dGeometry&, const T*, T*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
MT_INSTANTIATE(Half)
MT_INSTANTIATE(BFloat16)
#undef MT_INSTANTIATE

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above), the CUDA side of ops/pool/pool.cc: launches on the tensors'
// device's current stream.
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
