// The CUDA side of ops/device_map.h: device and dtype checks, broadcasting, the host-planned layout
// (ops/cuda/elementwise_plan.h) and the launch on the tensors' device's current stream.
#include "ops/cuda/host/elementwise.h"

#include <array>

#include "framework/cuda/stream.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/elementwise_plan.h"
#include "ops/map.h"

namespace mantissa {
namespace {

void check_devices(std::string_view op, std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  for (const Tensor* t : ts) {
    MT_CHECK(t->device() == first.device(), op, ": tensors are on different devices: ", first.device().str(), " and ",
             t->device().str(), ". HINT: move both to one device first");
  }
}

// The layout of `in` against a contiguous output of `shape`; inputs that leave more than kMaxDims dims
// after coalescing are materialized contiguous at the output's shape first (rare: 9-d broadcasts).
template <int N>
gpu::ElementwiseLayout<N> layout_for(const Shape& shape, std::array<Tensor, N>& in) {
  std::array<const Tensor*, N> ptrs;
  for (int k = 0; k < N; ++k) ptrs[k] = &in[k];
  if (auto l = gpu::plan_elementwise<N>(shape, ptrs)) return *l;
  for (int k = 0; k < N; ++k) in[k] = in[k].expand(shape).contiguous();
  auto l = gpu::plan_elementwise<N>(shape, ptrs);
  MT_ASSERT(l.has_value(), "layout_for: contiguous inputs of ", shape_str(shape), " did not plan");
  return *l;
}

DType floating_promoted(std::string_view op, std::initializer_list<const Tensor*> ts) {
  DType dt = (*ts.begin())->dtype();
  for (const Tensor* t : ts) dt = promote_types(dt, t->dtype());
  MT_CHECK(is_floating(dt), op, ": expected floating tensors, got ", dtype_name(dt));
  return dt;
}

}  // namespace

Tensor cuda_map_unary(const Tensor& x, std::string_view op, gpu::PointwiseOp<gpu::UnaryOp> code) {
  std::array<Tensor, 1> in{x};
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  const gpu::ElementwiseLayout<1> l = layout_for<1>(x.shape(), in);
  gpu::DeviceGuard guard(x.device());
  const cudaStream_t stream = gpu::current_stream(x.device());
  dispatch_floating(x.dtype(), op,
                    [&]<typename T>() { gpu::launch_unary<T>(code, l, in[0].data<T>(), out.data<T>(), stream); });
  return out;
}

Tensor cuda_map_binary(const Tensor& a, const Tensor& b, std::string_view op, gpu::PointwiseOp<gpu::BinaryOp> code) {
  check_devices(op, {&a, &b});
  const DType dt = floating_promoted(op, {&a, &b});
  std::array<Tensor, 2> in{detail::as_dtype(a, dt), detail::as_dtype(b, dt)};
  const Shape shape = cpu::broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, {.dtype = dt, .device = a.device()});
  const gpu::ElementwiseLayout<2> l = layout_for<2>(shape, in);
  gpu::DeviceGuard guard(a.device());
  const cudaStream_t stream = gpu::current_stream(a.device());
  dispatch_floating(dt, op, [&]<typename T>() {
    gpu::launch_binary<T>(code, l, in[0].data<T>(), in[1].data<T>(), out.data<T>(), stream);
  });
  return out;
}

Tensor cuda_map_ternary(const Tensor& a, const Tensor& b, const Tensor& c, std::string_view op,
                        gpu::PointwiseOp<gpu::TernaryOp> code) {
  check_devices(op, {&a, &b, &c});
  const DType dt = floating_promoted(op, {&a, &b, &c});
  std::array<Tensor, 3> in{detail::as_dtype(a, dt), detail::as_dtype(b, dt), detail::as_dtype(c, dt)};
  const Shape shape = cpu::broadcast_shapes(cpu::broadcast_shapes(a.shape(), b.shape(), op), c.shape(), op);
  Tensor out = empty(shape, {.dtype = dt, .device = a.device()});
  const gpu::ElementwiseLayout<3> l = layout_for<3>(shape, in);
  gpu::DeviceGuard guard(a.device());
  const cudaStream_t stream = gpu::current_stream(a.device());
  dispatch_floating(dt, op, [&]<typename T>() {
    gpu::launch_ternary<T>(code, l, in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), out.data<T>(), stream);
  });
  return out;
}

Tensor cuda_map_compare(const Tensor& a, const Tensor& b, std::string_view op, gpu::CompareOp code) {
  check_devices(op, {&a, &b});
  const DType dt = promote_types(a.dtype(), b.dtype());
  std::array<Tensor, 2> in{detail::as_dtype(a, dt), detail::as_dtype(b, dt)};
  const Shape shape = cpu::broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, {.dtype = DType::kBool, .device = a.device()});
  const gpu::ElementwiseLayout<2> l = layout_for<2>(shape, in);
  gpu::DeviceGuard guard(a.device());
  const cudaStream_t stream = gpu::current_stream(a.device());
  dispatch_all(dt, op, [&]<typename T>() {
    gpu::launch_compare<T>(code, l, in[0].data<T>(), in[1].data<T>(), out.data<bool>(), stream);
  });
  return out;
}

Tensor cuda_select(const Tensor& cond, const Tensor& x, const Tensor& y, std::string_view op) {
  check_devices(op, {&cond, &x, &y});
  const DType dt = promote_types(x.dtype(), y.dtype());
  std::array<Tensor, 3> in{cond, detail::as_dtype(x, dt), detail::as_dtype(y, dt)};
  const Shape shape = cpu::broadcast_shapes(cpu::broadcast_shapes(cond.shape(), x.shape(), op), y.shape(), op);
  Tensor out = empty(shape, {.dtype = dt, .device = x.device()});
  const gpu::ElementwiseLayout<3> l = layout_for<3>(shape, in);
  gpu::DeviceGuard guard(x.device());
  gpu::launch_select(static_cast<int>(element_size(dt)), l, in[0].data<bool>(), in[1].data_ptr(), in[2].data_ptr(),
                     out.data_ptr(), gpu::current_stream(x.device()));
  return out;
}

}  // namespace mantissa
