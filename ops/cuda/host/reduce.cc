// The CUDA side of ops/reduce.cc: the plan as the kernels' layout (ops/cuda/reduce_plan.h) and the
// launches on the input's device's current stream; var and max's backward are composed from device ops.
#include "ops/cuda/host/reduce.h"

#include <limits>

#include "framework/autograd.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/reduce.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/elementwise_plan.h"

namespace mantissa {
namespace {

// The plan's kept and reduced dims as the CUDA kernels' layout; inputs whose dims do not coalesce into
// kMaxDims are made contiguous first.
gpu::ReduceLayout cuda_layout(const Tensor& x, const cpu::ReducePlan& p, Tensor& storage) {
  if (auto l = gpu::plan_reduce(p.kept_shape, p.kept_strides, p.reduced_shape, p.reduced_strides)) {
    storage = x;
    return *l;
  }
  storage = x.contiguous();
  Shape kept_strides, reduced_strides;
  for (int64_t d = 0; d < storage.dim(); ++d)
    (p.reduce[d] ? reduced_strides : kept_strides).push_back(storage.stride(d));
  auto l = gpu::plan_reduce(p.kept_shape, kept_strides, p.reduced_shape, reduced_strides);
  MT_ASSERT(l.has_value(), "cuda_layout: a contiguous input did not plan");
  return *l;
}

}  // namespace

Tensor cuda_sum(const Tensor& x, const cpu::ReducePlan& p, double scale) {
  Tensor out = empty(p.out_shape, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  // An empty reduced part (x [4, 0] summed over dim 1) goes through the kernels too: its geometry is one
  // slice that adds nothing, so each output is 0 * scale as on the CPU (0 for sum, NaN for mean).
  Tensor xs;
  const gpu::ReduceLayout l = cuda_layout(x, p, xs);
  gpu::DeviceGuard guard(x.device());
  const gpu::ReduceGeometry g = gpu::sum_geometry(l, x.device().index);
  const DType acc = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const Tensor workspace = g.splits > 1 ? empty({l.n_out * g.splits}, {.dtype = acc, .device = x.device()}) : Tensor();
  dispatch_floating(x.dtype(), "sum", [&]<typename T>() {
    gpu::launch_sum<T>(l, g, scale, xs.data<T>(), workspace.defined() ? workspace.data_ptr() : nullptr, out.data<T>(),
                       gpu::current_stream(x.device()));
  });
  return out;
}

Tensor cuda_var(const Tensor& x, const Tensor& mean, const cpu::ReducePlan& p, double denom) {
  // The CPU's two passes from device ops: centre on the (dtype-rounded) mean in the accumulation type
  // (f32, f64 for f64), square, and sum with the scale 1/denom, rounded once to the dtype.
  if (denom <= 0) {
    return full(p.out_shape, std::numeric_limits<double>::quiet_NaN(), {.dtype = x.dtype(), .device = x.device()});
  }
  NoGradGuard no_grad;
  const DType ad = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const Tensor d = sub(x.to(ad), mean.to(ad));
  const Tensor sq = mul(d, d);
  return cuda_sum(sq, cpu::with_strides(p, sq.strides()), 1.0 / denom).to(x.dtype());
}

void cuda_max(const Tensor& x, const cpu::ReducePlan& p, int64_t /*dim: the plan's one reduced dim*/,
              const MaxResult& r) {
  MT_CHECK(x.dtype() != DType::kBool, "max: no CUDA kernel for bool tensors. HINT: convert with .to(kInt32)");
  Tensor xs;
  const gpu::ReduceLayout l = cuda_layout(x, p, xs);
  gpu::DeviceGuard guard(x.device());
  dispatch_all(x.dtype(), "max", [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      gpu::launch_max<T>(l, xs.data<T>(), r.values.data<T>(), r.indices.data<int64_t>(),
                         gpu::current_stream(x.device()));
    }
  });
}

Tensor cuda_max_backward(const Tensor& g, const Tensor& indices, const Shape& input_shape, int64_t dim) {
  // g where the position along dim equals the saved index, else 0 (broadcast compare and select).
  Shape pos_shape(input_shape.size(), 1);
  pos_shape[dim] = input_shape[dim];
  const Tensor pos = arange(0.0, static_cast<double>(input_shape[dim])).reshape(pos_shape).to(g.device());
  return where(eq(pos, indices), g, zeros({}, {.dtype = g.dtype(), .device = g.device()}));
}

}  // namespace mantissa
