// CUDA softmax / log_softmax (forward, backward) and the fused cross-entropy. A row goes to a warp
// (rows up to 1024 elements, 8 rows per block) or to a 256-thread block (longer rows), and the groups
// stride over the rows past the grid (row_math.h's RowLoop); each thread keeps
// an online (max, sum of exps) over its elements, merged across the row with shuffles (and shared
// memory for a block), then a second pass over the row writes the outputs.
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/softmax/softmax_cuda.h"
#include "ops/softmax/softmax_launch.h"

namespace mantissa::gpu {
namespace {

constexpr int kThreads = 256;

// The rows a thread group works on (row_math.h's grid-stride RowLoop), and the thread's lane within the
// group (TPR threads per row).
template <int TPR>
__device__ __forceinline__ RowLoop group_rows() {
  return row_loop(blockIdx.x, gridDim.x, threadIdx.x / TPR, kThreads / TPR);
}
template <int TPR>
__device__ __forceinline__ int group_lane() {
  return static_cast<int>(threadIdx.x % TPR);
}

// Merge of every thread's value within its row group: a shuffle tree for a warp, plus shared memory
// across the warps of a block. Every thread of the group gets the result.
template <int TPR, typename C>
__device__ __forceinline__ MaxSum<C> row_merge(MaxSum<C> v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum<C> o{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = max_sum_merge(v, o);
  }
  if constexpr (TPR > 32) {
    __shared__ C ms[kThreads / 32], ss[kThreads / 32];
    const int warp = threadIdx.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
      ms[warp] = v.m;
      ss[warp] = v.s;
    }
    __syncthreads();
    v = {ms[0], ss[0]};
    for (int w = 1; w < TPR / 32; ++w) v = max_sum_merge(v, MaxSum<C>{ms[w], ss[w]});
  }
  return v;
}

// The online (max, sum) of one row, merged over the group.
template <int TPR, typename D>
__device__ __forceinline__ MaxSum<compute_t<D>> row_max_sum(const D* x, int64_t base, int64_t dim, int64_t step,
                                                            int lane) {
  using C = compute_t<D>;
  MaxSum<C> a = max_sum_identity<C>();
  for (int64_t j = lane; j < dim; j += TPR) max_sum_add(a, load(x[base + j * step]));
  return row_merge<TPR>(a);
}

template <int TPR, typename D>
__global__ void softmax_forward_kernel(RowGeometry g, SoftmaxKind kind, const D* __restrict__ x, D* __restrict__ y) {
  using C = compute_t<D>;
  const RowLoop rows = group_rows<TPR>();
  const int lane = group_lane<TPR>();
  for (int64_t row = rows.first; row < g.rows(); row += rows.step) {
    const int64_t base = g.base(row);
    const MaxSum<C> r = row_max_sum<TPR>(x, base, g.dim, g.inner, lane);
    if (kind == SoftmaxKind::kLogSoftmax) {
      const C ls = hd_log(r.s);
      for (int64_t j = lane; j < g.dim; j += TPR) {
        const int64_t i = base + j * g.inner;
        y[i] = store<D>((load(x[i]) - r.m) - ls);  // (x - m) - log(s), as the CPU
      }
    } else {
      const C inv = C(1) / r.s;
      for (int64_t j = lane; j < g.dim; j += TPR) {
        const int64_t i = base + j * g.inner;
        y[i] = store<D>(hd_exp(load(x[i]) - r.m) * inv);
      }
    }
  }
}

template <int TPR, typename D>
__global__ void softmax_backward_kernel(RowGeometry g, SoftmaxKind kind, const D* __restrict__ dy,
                                        const D* __restrict__ y, D* __restrict__ dx) {
  using C = compute_t<D>;
  const RowLoop rows = group_rows<TPR>();
  const int lane = group_lane<TPR>();
  for (int64_t row = rows.first; row < g.rows(); row += rows.step) {
    const int64_t base = g.base(row);
    C acc = 0;
    for (int64_t j = lane; j < g.dim; j += TPR) {
      const int64_t i = base + j * g.inner;
      acc += kind == SoftmaxKind::kSoftmax ? load(dy[i]) * load(y[i]) : load(dy[i]);
    }
    const C total = row_sum<TPR>(acc);
    for (int64_t j = lane; j < g.dim; j += TPR) {
      const int64_t i = base + j * g.inner;
      const C yv = load(y[i]), dv = load(dy[i]);
      dx[i] = store<D>(kind == SoftmaxKind::kSoftmax ? yv * (dv - total) : dv - hd_exp(yv) * total);
    }
  }
}

template <int TPR, typename D, typename C>
__global__ void cross_entropy_forward_kernel(RowGeometry g, const D* __restrict__ x, const int64_t* __restrict__ target,
                                             int64_t ignore_index, C* __restrict__ loss, C* __restrict__ lse) {
  const RowLoop rows = group_rows<TPR>();
  const int lane = group_lane<TPR>();
  for (int64_t row = rows.first; row < g.rows(); row += rows.step) {
    const int64_t base = g.base(row);
    const MaxSum<C> r = row_max_sum<TPR>(x, base, g.dim, g.inner, lane);
    if (lane == 0) {
      const C l = r.m + hd_log(r.s);
      const int64_t t = target[row];
      lse[row] = l;
      if (t == ignore_index) {
        loss[row] = C(0);
      } else if (t < 0 || t >= g.dim) {
        loss[row] = static_cast<C>(NAN);
      } else {
        loss[row] = l - static_cast<C>(load(x[base + t * g.inner]));
      }
    }
  }
}

template <typename D, typename C>
__global__ void loss_reduce_kernel(int64_t positions, Reduction reduction, const C* __restrict__ loss,
                                   const int64_t* __restrict__ target, int64_t ignore_index, D* __restrict__ out,
                                   double* __restrict__ count) {
  __shared__ double scratch[32];
  double total = 0, n = 0;
  for (int64_t p = threadIdx.x; p < positions; p += blockDim.x) {
    total += static_cast<double>(loss[p]);
    n += target[p] != ignore_index ? 1.0 : 0.0;
  }
  total = block_sum(total, scratch);
  n = block_sum(n, scratch);
  if (threadIdx.x == 0) {
    *count = n;
    out[0] = store<D>(reduction == Reduction::kMean ? total / n : total);  // 0/0 = NaN, as the CPU
  }
}

template <typename D, typename C>
__global__ void loss_none_kernel(int64_t positions, const C* __restrict__ loss, D* __restrict__ out) {
  for (int64_t p = global_thread(); p < positions; p += grid_threads()) out[p] = store<D>(loss[p]);
}

template <int TPR, typename D, typename C>
__global__ void cross_entropy_backward_kernel(RowGeometry g, Reduction reduction, const D* __restrict__ x,
                                              const int64_t* __restrict__ target, const C* __restrict__ lse,
                                              const D* __restrict__ grad, const double* __restrict__ count,
                                              int64_t ignore_index, D* __restrict__ dx) {
  const RowLoop rows = group_rows<TPR>();
  const int lane = group_lane<TPR>();
  for (int64_t row = rows.first; row < g.rows(); row += rows.step) {
    const int64_t base = g.base(row);
    const int64_t t = target[row];
    C scale;
    if (reduction == Reduction::kNone) {
      scale = static_cast<C>(load(grad[row]));
    } else {
      double k = static_cast<double>(load(grad[0]));  // as the CPU: in double, then to C
      if (reduction == Reduction::kMean) k /= *count;
      scale = static_cast<C>(k);
    }
    const C l = lse[row];
    for (int64_t j = lane; j < g.dim; j += TPR) {
      const int64_t i = base + j * g.inner;
      if (t == ignore_index) {
        dx[i] = store<D>(C(0));
      } else {
        const C p = hd_exp(static_cast<C>(load(x[i])) - l);
        dx[i] = store<D>((p - (j == t ? C(1) : C(0))) * scale);
      }
    }
  }
}

unsigned row_blocks(int64_t rows, int tpr) { return row_launch_blocks(rows, kThreads / tpr); }

}  // namespace

template <typename T>
void launch_softmax_forward(RowGeometry g, SoftmaxKind kind, const T* x, T* y, cudaStream_t stream) {
  if (g.rows() == 0 || g.dim == 0) return;
  const int tpr = softmax_threads_per_row(g.dim);
  if (tpr == 32) {
    softmax_forward_kernel<32><<<row_blocks(g.rows(), 32), kThreads, 0, stream>>>(g, kind, dev(x), dev(y));
  } else {
    softmax_forward_kernel<kThreads><<<row_blocks(g.rows(), kThreads), kThreads, 0, stream>>>(g, kind, dev(x), dev(y));
  }
  MT_CUDA_LAUNCH_CHECK("softmax_forward_kernel");
}

template <typename T>
void launch_softmax_backward(RowGeometry g, SoftmaxKind kind, const T* dy, const T* y, T* dx, cudaStream_t stream) {
  if (g.rows() == 0 || g.dim == 0) return;
  if (softmax_threads_per_row(g.dim) == 32) {
    softmax_backward_kernel<32><<<row_blocks(g.rows(), 32), kThreads, 0, stream>>>(g, kind, dev(dy), dev(y), dev(dx));
  } else {
    softmax_backward_kernel<kThreads>
        <<<row_blocks(g.rows(), kThreads), kThreads, 0, stream>>>(g, kind, dev(dy), dev(y), dev(dx));
  }
  MT_CUDA_LAUNCH_CHECK("softmax_backward_kernel");
}

template <typename T, typename C>
void launch_cross_entropy_forward(RowGeometry g, const T* logits, const int64_t* target, int64_t ignore_index, C* loss,
                                  C* lse, cudaStream_t stream) {
  if (g.rows() == 0) return;
  if (softmax_threads_per_row(g.dim) == 32) {
    cross_entropy_forward_kernel<32>
        <<<row_blocks(g.rows(), 32), kThreads, 0, stream>>>(g, dev(logits), target, ignore_index, loss, lse);
  } else {
    cross_entropy_forward_kernel<kThreads>
        <<<row_blocks(g.rows(), kThreads), kThreads, 0, stream>>>(g, dev(logits), target, ignore_index, loss, lse);
  }
  MT_CUDA_LAUNCH_CHECK("cross_entropy_forward_kernel");
}

template <typename T, typename C>
void launch_loss_reduce(int64_t positions, Reduction reduction, const C* loss, const int64_t* target,
                        int64_t ignore_index, T* out, double* count, cudaStream_t stream) {
  if (reduction == Reduction::kNone) {
    if (positions == 0) return;
    const LaunchGeometry lg = elementwise_geometry(positions);
    loss_none_kernel<<<lg.blocks, lg.threads, 0, stream>>>(positions, loss, dev(out));
    MT_CUDA_LAUNCH_CHECK("loss_none_kernel");
  } else {
    loss_reduce_kernel<<<1, 1024, 0, stream>>>(positions, reduction, loss, target, ignore_index, dev(out), count);
    MT_CUDA_LAUNCH_CHECK("loss_reduce_kernel");
  }
}

template <typename T, typename C>
void launch_cross_entropy_backward(RowGeometry g, Reduction reduction, const T* logits, const int64_t* target,
                                   const C* lse, const T* grad, const double* count, int64_t ignore_index, T* dlogits,
                                   cudaStream_t stream) {
  if (g.rows() == 0) return;
  if (softmax_threads_per_row(g.dim) == 32) {
    cross_entropy_backward_kernel<32><<<row_blocks(g.rows(), 32), kThreads, 0, stream>>>(
        g, reduction, dev(logits), target, lse, dev(grad), count, ignore_index, dev(dlogits));
  } else {
    cross_entropy_backward_kernel<kThreads><<<row_blocks(g.rows(), kThreads), kThreads, 0, stream>>>(
        g, reduction, dev(logits), target, lse, dev(grad), count, ignore_index, dev(dlogits));
  }
  MT_CUDA_LAUNCH_CHECK("cross_entropy_backward_kernel");
}

#define MT_INSTANTIATE(T, C)                                                                                    \
  template void launch_softmax_forward<T>(RowGeometry, SoftmaxKind, const T*, T*, cudaStream_t);                \
  template void launch_softmax_backward<T>(RowGeometry, SoftmaxKind, const T*, const T*, T*, cudaStream_t);     \
  template void launch_cross_entropy_forward<T, C>(RowGeometry, const T*, const int64_t*, int64_t, C*, C*,      \
                                                   cudaStream_t);                                               \
  template void launch_loss_reduce<T, C>(int64_t, Reduction, const C*, const int64_t*, int64_t, T*, double*,    \
                                         cudaStream_t);                                                         \
  template void launch_cross_entropy_backward<T, C>(RowGeometry, Reduction, const T*, const int64_t*, const C*, \
                                                    const T*, const double*, int64_t, T*, cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(double, double)
MT_INSTANTIATE(Half, float)
MT_INSTANTIATE(BFloat16, float)
#undef MT_INSTANTIATE

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above): the rows of the tensors' [outer, dim, inner]
// geometry, launched on their device's current stream.
namespace mantissa {

void cuda_softmax(const Tensor& x, const Tensor& y, int64_t dim, SoftmaxKind kind) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), kind == SoftmaxKind::kSoftmax ? "softmax" : "log_softmax", [&]<typename T>() {
    gpu::launch_softmax_forward<T>(softmax_rows(x.shape(), dim), kind, x.data<T>(), y.data<T>(),
                                   gpu::current_stream(x.device()));
  });
}

void cuda_softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, int64_t dim, SoftmaxKind kind) {
  gpu::DeviceGuard guard(y.device());
  dispatch_floating(y.dtype(), kind == SoftmaxKind::kSoftmax ? "SoftmaxBackward" : "LogSoftmaxBackward",
                    [&]<typename T>() {
                      gpu::launch_softmax_backward<T>(softmax_rows(y.shape(), dim), kind, dy.data<T>(), y.data<T>(),
                                                      dx.data<T>(), gpu::current_stream(y.device()));
                    });
}

}  // namespace mantissa
