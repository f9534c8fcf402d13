// The CUDA side of ops/shape.cc and ops/index_put.cc: gather plans and launches on the tensors' device's
// current stream.
#include "ops/cuda/host/shape.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/index.h"

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
