// CUDA index kernels: index_select rows, gather along a dim (strided input), their scatter-add
// backwards by atomic adds into a zeroed accumulator (f32 for 16-bit), index_put's row copy, one_hot,
// and nll_loss.
#include <type_traits>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/shape/index_launch.h"
#include "ops/shape/shape_cuda.h"

namespace mantissa::gpu {
namespace {

// The value an out-of-range index reads: NaN for floating types, 0 otherwise (the device cannot throw).
template <typename D>
__device__ __forceinline__ D invalid_value() {
  if constexpr (std::is_same_v<D, __half> || std::is_same_v<D, __nv_bfloat16> || std::is_floating_point_v<D>) {
    return store<D>(compute_t<D>(NAN));
  } else if constexpr (std::is_same_v<D, Float8E4M3> || std::is_same_v<D, Float8E5M2>) {
    D nan{};
    nan.bits = 0x7f;  // a nan in both formats
    return nan;
  } else {
    return D(0);
  }
}

template <typename D>
__global__ void index_select_kernel(const D* __restrict__ x, const int64_t* __restrict__ index, int64_t n_index,
                                    int64_t outer, int64_t size, int64_t inner, D* __restrict__ out) {
  const int64_t total = outer * n_index * inner;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t k = e % inner, r = e / inner;
    const int64_t i = r % n_index, o = r / n_index;
    const int64_t row = index[i];
    out[e] = index_in_range(row, size) ? x[(o * size + row) * inner + k] : invalid_value<D>();
  }
}

template <typename D, typename A>
__global__ void index_add_kernel(const D* __restrict__ grad, const int64_t* __restrict__ index, int64_t n_index,
                                 int64_t outer, int64_t size, int64_t inner, A* __restrict__ acc) {
  const int64_t total = outer * n_index * inner;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t k = e % inner, r = e / inner;
    const int64_t i = r % n_index, o = r / n_index;
    const int64_t row = index[i];
    if (index_in_range(row, size)) atomicAdd(acc + (o * size + row) * inner + k, static_cast<A>(load(grad[e])));
  }
}

template <typename D>
__global__ void index_copy_kernel(const D* __restrict__ src, const int64_t* __restrict__ index, int64_t n_index,
                                  int64_t size, int64_t inner, D* __restrict__ out) {
  for (int64_t e = global_thread(); e < n_index * inner; e += grid_threads()) {
    const int64_t i = e / inner, k = e - i * inner;
    const int64_t row = index[i];
    if (index_in_range(row, size)) out[row * inner + k] = src[e];
  }
}

template <typename D>
__global__ void gather_kernel(const D* __restrict__ x, const int64_t* __restrict__ index, GatherGeometry g,
                              D* __restrict__ out) {
  for (int64_t p = global_thread(); p < g.numel; p += grid_threads()) {
    const int64_t i = index[p];
    out[p] = index_in_range(i, g.dim_size) ? x[gather_offset(g, p, i)] : invalid_value<D>();
  }
}

template <typename D, typename A>
__global__ void scatter_add_kernel(const D* __restrict__ src, const int64_t* __restrict__ index, GatherGeometry g,
                                   A* __restrict__ acc) {
  for (int64_t p = global_thread(); p < g.numel; p += grid_threads()) {
    const int64_t i = index[p];
    if (index_in_range(i, g.dim_size)) atomicAdd(acc + gather_offset(g, p, i), static_cast<A>(load(src[p])));
  }
}

__global__ void one_hot_kernel(const int64_t* __restrict__ index, int64_t n, int64_t classes,
                               int64_t* __restrict__ out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t c = index[i];
    if (index_in_range(c, classes)) out[i * classes + c] = 1;
  }
}

template <typename D, typename C>
__global__ void nll_forward_kernel(const D* __restrict__ x, const int64_t* __restrict__ target, int64_t batch,
                                   int64_t classes, int64_t inner, int64_t ignore_index, C* __restrict__ loss) {
  for (int64_t p = global_thread(); p < batch * inner; p += grid_threads()) {
    const int64_t b = p / inner, i = p - b * inner;
    const int64_t t = target[p];
    if (t == ignore_index) {
      loss[p] = C(0);
    } else if (!index_in_range(t, classes)) {
      loss[p] = C(NAN);
    } else {
      loss[p] = -static_cast<C>(load(x[(b * classes + t) * inner + i]));
    }
  }
}

template <typename D, typename C>
__global__ void nll_backward_kernel(const int64_t* __restrict__ target, const D* __restrict__ grad,
                                    const double* __restrict__ count, Reduction reduction, int64_t batch,
                                    int64_t classes, int64_t inner, int64_t ignore_index, D* __restrict__ dx) {
  const int64_t total = batch * classes * inner;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t i = e % inner, r = e / inner;
    const int64_t c = r % classes, b = r / classes;
    const int64_t p = b * inner + i;
    const int64_t t = target[p];
    C scale;
    if (reduction == Reduction::kNone) {
      scale = static_cast<C>(load(grad[p]));
    } else {
      double k = static_cast<double>(load(grad[0]));  // as the CPU: in double, then to C
      if (reduction == Reduction::kMean) k /= *count;
      scale = static_cast<C>(k);
    }
    dx[e] = store<D>(t != ignore_index && c == t ? -scale : C(0));
  }
}

}  // namespace

template <typename T>
void launch_index_select(const T* x, const int64_t* index, int64_t n_index, int64_t outer, int64_t size, int64_t inner,
                         T* out, cudaStream_t stream) {
  const int64_t total = outer * n_index * inner;
  if (total == 0) return;
  const LaunchGeometry g = elementwise_geometry(total);
  index_select_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(x), index, n_index, outer, size, inner, dev(out));
  MT_CUDA_LAUNCH_CHECK("index_select_kernel");
}

template <typename T, typename A>
void launch_index_add(const T* grad, const int64_t* index, int64_t n_index, int64_t outer, int64_t size, int64_t inner,
                      A* acc, cudaStream_t stream) {
  const int64_t total = outer * n_index * inner;
  if (total == 0) return;
  const LaunchGeometry g = elementwise_geometry(total);
  index_add_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(grad), index, n_index, outer, size, inner, acc);
  MT_CUDA_LAUNCH_CHECK("index_add_kernel");
}

template <typename T>
void launch_index_copy(const T* src, const int64_t* index, int64_t n_index, int64_t size, int64_t inner, T* out,
                       cudaStream_t stream) {
  if (n_index * inner == 0) return;
  const LaunchGeometry g = elementwise_geometry(n_index * inner);
  index_copy_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(src), index, n_index, size, inner, dev(out));
  MT_CUDA_LAUNCH_CHECK("index_copy_kernel");
}

template <typename T>
void launch_gather(const T* x, const int64_t* index, GatherGeometry geo, T* out, cudaStream_t stream) {
  if (geo.numel == 0) return;
  const LaunchGeometry g = elementwise_geometry(geo.numel);
  gather_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(x), index, geo, dev(out));
  MT_CUDA_LAUNCH_CHECK("gather_kernel");
}

template <typename T, typename A>
void launch_scatter_add(const T* src, const int64_t* index, GatherGeometry geo, A* acc, cudaStream_t stream) {
  if (geo.numel == 0) return;
  const LaunchGeometry g = elementwise_geometry(geo.numel);
  scatter_add_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(src), index, geo, acc);
  MT_CUDA_LAUNCH_CHECK("scatter_add_kernel");
}

void launch_one_hot(const int64_t* index, int64_t n, int64_t classes, int64_t* out, cudaStream_t stream) {
  if (n == 0 || classes == 0) return;
  const LaunchGeometry g = elementwise_geometry(n);
  one_hot_kernel<<<g.blocks, g.threads, 0, stream>>>(index, n, classes, out);
  MT_CUDA_LAUNCH_CHECK("one_hot_kernel");
}

template <typename T, typename C>
void launch_nll_forward(const T* log_probs, const int64_t* target, int64_t batch, int64_t classes, int64_t inner,
                        int64_t ignore_index, C* loss, cudaStream_t stream) {
  if (batch * inner == 0) return;
  const LaunchGeometry g = elementwise_geometry(batch * inner);
  nll_forward_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(log_probs), target, batch, classes, inner, ignore_index,
                                                         loss);
  MT_CUDA_LAUNCH_CHECK("nll_forward_kernel");
}

template <typename T, typename C>
void launch_nll_backward(const int64_t* target, const T* grad, const double* count, Reduction reduction, int64_t batch,
                         int64_t classes, int64_t inner, int64_t ignore_index, T* dx, cudaStream_t stream) {
  const int64_t total = batch * classes * inner;
  if (total == 0) return;
  const LaunchGeometry g = elementwise_geometry(total);
  nll_backward_kernel<device_t<T>, C><<<g.blocks, g.threads, 0, stream>>>(target, dev(grad), count, reduction, batch,
                                                                          classes, inner, ignore_index, dev(dx));
  MT_CUDA_LAUNCH_CHECK("nll_backward_kernel");
}

#define MT_INSTANTIATE_FLOAT(T, A)                                                                              \
  template void launch_index_add<T, A>(const T*, const int64_t*, int64_t, int64_t, int64_t, int64_t, A*,        \
                                       cudaStream_t);                                                           \
  template void launch_index_copy<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*, cudaStream_t);    \
  template void launch_scatter_add<T, A>(const T*, const int64_t*, GatherGeometry, A*, cudaStream_t);           \
  template void launch_nll_forward<T, A>(const T*, const int64_t*, int64_t, int64_t, int64_t, int64_t, A*,      \
                                         cudaStream_t);                                                         \
  template void launch_nll_backward<T, A>(const int64_t*, const T*, const double*, Reduction, int64_t, int64_t, \
                                          int64_t, int64_t, T*, cudaStream_t);
MT_INSTANTIATE_FLOAT(float, float)
MT_INSTANTIATE_FLOAT(double, double)
MT_INSTANTIATE_FLOAT(Half, float)
MT_INSTANTIATE_FLOAT(BFloat16, float)
#undef MT_INSTANTIATE_FLOAT

#define MT_INSTANTIATE_ALL(T)                                                                            \
  template void launch_index_select<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, int64_t, T*, \
                                       cudaStream_t);                                                    \
  template void launch_gather<T>(const T*, const int64_t*, GatherGeometry, T*, cudaStream_t);
MT_INSTANTIATE_ALL(float)
MT_INSTANTIATE_ALL(double)
MT_INSTANTIATE_ALL(Half)
MT_INSTANTIATE_ALL(BFloat16)
MT_INSTANTIATE_ALL(int64_t)
MT_INSTANTIATE_ALL(int32_t)
MT_INSTANTIATE_ALL(bool)
MT_INSTANTIATE_ALL(Float8E4M3)
MT_INSTANTIATE_ALL(Float8E5M2)
MT_INSTANTIATE_ALL(uint8_t)
#undef MT_INSTANTIATE_ALL

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above), the CUDA side of ops/shape/shape.cc and
// ops/shape/index_put.cc: gather plans and launches on the tensors' device's current stream.
namespace mantissa {
namespace {

gpu::GatherGeometry gather_geometry(const Shape& index_shape, const Shape& strides, int64_t dim, int64_t dim_size,
                                    std::string_view op) {
  const gpu::GatherPlan plan = gpu::plan_gather(index_shape, strides, dim, dim_size);
  MT_CHECK(plan.ok, op, ": the CUDA kernel handles at most ", gpu::kMaxDims, " dims, got ", shape_str(index_shape),
           ". HINT: reshape to fewer dims");
  return plan.geometry;
}

}  // namespace

void cuda_index_select(const Tensor& x, const Tensor& idx, const cpu::IndexGeometry& geo, const Tensor& out) {
  gpu::DeviceGuard guard(x.device());
  dispatch_with_float8(x.dtype(), "index_select", [&]<typename T>() {
    gpu::launch_index_select<T>(x.data<T>(), idx.data<int64_t>(), idx.numel(), geo.outer, geo.size, geo.inner,
                                out.data<T>(), gpu::current_stream(x.device()));
  });
}

void cuda_index_add(const Tensor& src, const Tensor& idx, const cpu::IndexGeometry& geo, const Tensor& acc) {
  gpu::DeviceGuard guard(src.device());
  dispatch_floating(src.dtype(), "index_add", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_index_add<T, C>(src.data<T>(), idx.data<int64_t>(), idx.numel(), geo.outer, geo.size, geo.inner,
                                acc.data<C>(), gpu::current_stream(src.device()));
  });
}

void cuda_gather(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& out) {
  const int64_t dim_size = x.dim() == 0 ? 1 : x.size(dim);
  const gpu::GatherGeometry geo = gather_geometry(idx.shape(), x.strides(), dim, dim_size, "gather");
  gpu::DeviceGuard guard(x.device());
  dispatch_with_float8(x.dtype(), "gather", [&]<typename T>() {
    gpu::launch_gather<T>(x.data<T>(), idx.data<int64_t>(), geo, out.data<T>(), gpu::current_stream(x.device()));
  });
}

void cuda_scatter_add(const Tensor& src, const Tensor& idx, int64_t dim, const Tensor& acc, std::string_view op) {
  const int64_t dim_size = acc.dim() == 0 ? 1 : acc.size(dim);
  const gpu::GatherGeometry geo = gather_geometry(idx.shape(), acc.strides(), dim, dim_size, op);
  gpu::DeviceGuard guard(src.device());
  dispatch_floating(src.dtype(), op, [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_scatter_add<T, C>(src.data<T>(), idx.data<int64_t>(), geo, acc.data<C>(),
                                  gpu::current_stream(src.device()));
  });
}

void cuda_one_hot(const Tensor& idx, int64_t classes, const Tensor& out) {
  gpu::DeviceGuard guard(idx.device());
  gpu::launch_one_hot(idx.data<int64_t>(), idx.numel(), classes, out.data<int64_t>(),
                      gpu::current_stream(idx.device()));
}

void cuda_index_copy(const Tensor& values, const Tensor& idx, const Tensor& rows, int64_t inner) {
  gpu::DeviceGuard guard(rows.device());
  dispatch_floating(rows.dtype(), "index_put", [&]<typename T>() {
    gpu::launch_index_copy<T>(values.data<T>(), idx.data<int64_t>(), idx.numel(), rows.size(0), inner, rows.data<T>(),
                              gpu::current_stream(rows.device()));
  });
}

}  // namespace mantissa
