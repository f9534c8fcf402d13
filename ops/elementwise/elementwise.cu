// CUDA elementwise kernels: a contiguous path that moves 16-byte vectors (alignment checked on the
// host, scalar tail in the same kernel) and a broadcast/strided path whose threads turn their output
// index into input offsets with an OffsetCalc (32-bit index math when it fits). The per-element math
// is ops/pointwise_math.h: an op code names the formula the CPU op calls, evaluated here with CUDA's
// math library (pointwise::LibMath).
#include <array>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/elementwise/elementwise_launch.h"
#include "ops/elementwise/elementwise_plan.h"
#include "ops/elementwise/typed_entries_cpu.h"

namespace mantissa::gpu {
namespace {

template <typename In, int N>
struct Inputs {
  const In* p[N];
};

// Output element of In values (one per input); Fn::operator()(const In (&)[N]) returns Out.
template <int V, int N, typename Out, typename In, typename Fn>
__global__ void flat_kernel(Out* __restrict__ out, Inputs<In, N> in, int64_t n, Fn fn) {
  using InVec = AlignedArray<In, V>;
  using OutVec = AlignedArray<Out, V>;
  const int64_t nvec = n / V;
  for (int64_t v = global_thread(); v < nvec; v += grid_threads()) {
    InVec x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k] = reinterpret_cast<const InVec*>(in.p[k])[v];
    OutVec r;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      In e[N];
#pragma unroll
      for (int k = 0; k < N; ++k) e[k] = x[k].v[j];
      r.v[j] = fn(e);
    }
    reinterpret_cast<OutVec*>(out)[v] = r;
  }
  for (int64_t i = nvec * V + global_thread(); i < n; i += grid_threads()) {  // the scalar tail
    In e[N];
#pragma unroll
    for (int k = 0; k < N; ++k) e[k] = in.p[k][i];
    out[i] = fn(e);
  }
}

template <int N, typename I, typename Out, typename In, typename Fn>
__global__ void strided_kernel(Out* __restrict__ out, Inputs<In, N> in, I n, OffsetCalc<N, I> calc, Fn fn) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[N];
    calc.offsets(i, off);
    In e[N];
#pragma unroll
    for (int k = 0; k < N; ++k) e[k] = in.p[k][off[k]];
    out[i] = fn(e);
  }
}

template <int N, typename Out, typename In, typename Fn>
void launch_map(const ElementwiseLayout<N>& l, Out* out, const std::array<const In*, N>& ptrs, Fn fn,
                cudaStream_t stream) {
  if (l.numel == 0) return;
  Inputs<In, N> in;
  for (int k = 0; k < N; ++k) in.p[k] = ptrs[k];
  if (l.flat) {
    constexpr int V = vector_width<In>();
    const void* in_ptrs[N];
    for (int k = 0; k < N; ++k) in_ptrs[k] = ptrs[k];
    if (flat_vector_width(V, out, sizeof(Out), in_ptrs, N, sizeof(In)) > 1) {
      const LaunchGeometry g = elementwise_geometry(std::max<int64_t>(1, l.numel / V));
      flat_kernel<V, N><<<g.blocks, g.threads, 0, stream>>>(out, in, l.numel, fn);
      MT_CUDA_LAUNCH_CHECK("flat_kernel (16-byte vectors)");
    } else {
      const LaunchGeometry g = elementwise_geometry(l.numel);
      flat_kernel<1, N><<<g.blocks, g.threads, 0, stream>>>(out, in, l.numel, fn);
      MT_CUDA_LAUNCH_CHECK("flat_kernel (scalar)");
    }
  } else {
    const LaunchGeometry g = elementwise_geometry(l.numel);
    if (fits_32bit(l)) {
      strided_kernel<N, uint32_t><<<g.blocks, g.threads, 0, stream>>>(out, in, static_cast<uint32_t>(l.numel),
                                                                      make_offset_calc<uint32_t>(l), fn);
      MT_CUDA_LAUNCH_CHECK("strided_kernel (32-bit index)");
    } else {
      strided_kernel<N, int64_t>
          <<<g.blocks, g.threads, 0, stream>>>(out, in, l.numel, make_offset_calc<int64_t>(l), fn);
      MT_CUDA_LAUNCH_CHECK("strided_kernel (64-bit index)");
    }
  }
}

template <typename D>
struct UnaryFn {
  using C = compute_t<D>;
  UnaryOp op;
  C s0, s1;
  __device__ D operator()(const D (&v)[1]) const { return store<D>(apply_unary<C>(op, load(v[0]), s0, s1)); }
};
template <typename D>
struct BinaryFn {
  using C = compute_t<D>;
  BinaryOp op;
  C s0, s1;
  __device__ D operator()(const D (&v)[2]) const {
    return store<D>(apply_binary<C>(op, load(v[0]), load(v[1]), s0, s1));
  }
};
template <typename D>
struct TernaryFn {
  using C = compute_t<D>;
  TernaryOp op;
  C s0;
  __device__ D operator()(const D (&v)[3]) const {
    return store<D>(apply_ternary<C>(op, load(v[0]), load(v[1]), load(v[2]), s0));
  }
};
template <typename D>
struct CompareFn {
  CompareOp op;
  __device__ bool operator()(const D (&v)[2]) const { return apply_compare(op, load(v[0]), load(v[1])); }
};

// cond ? a : b over bits of U; the three inputs have different types, so this kernel reads them itself.
template <typename U, typename I>
__global__ void select_kernel(U* __restrict__ out, const bool* cond, const U* a, const U* b, I n,
                              OffsetCalc<3, I> calc) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[3];
    calc.offsets(i, off);
    out[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
  }
}

template <typename U>
void launch_select_bits(const ElementwiseLayout<3>& layout, const bool* cond, const void* a, const void* b, void* out,
                        cudaStream_t stream) {
  ElementwiseLayout<3> l = layout;
  if (l.flat) {  // one dim of unit strides
    l.flat = false;
    l.ndim = 1;
    l.sizes[0] = l.numel;
    for (int k = 0; k < 3; ++k) l.strides[k][0] = 1;
  }
  const LaunchGeometry g = elementwise_geometry(l.numel);
  U* o = static_cast<U*>(out);
  const U* ap = static_cast<const U*>(a);
  const U* bp = static_cast<const U*>(b);
  if (fits_32bit(l)) {
    select_kernel<U, uint32_t><<<g.blocks, g.threads, 0, stream>>>(o, cond, ap, bp, static_cast<uint32_t>(l.numel),
                                                                   make_offset_calc<uint32_t>(l));
    MT_CUDA_LAUNCH_CHECK("select_kernel (32-bit index)");
  } else {
    select_kernel<U, int64_t>
        <<<g.blocks, g.threads, 0, stream>>>(o, cond, ap, bp, l.numel, make_offset_calc<int64_t>(l));
    MT_CUDA_LAUNCH_CHECK("select_kernel (64-bit index)");
  }
}

}  // namespace

template <typename T>
void launch_unary(PointwiseOp<UnaryOp> op, const ElementwiseLayout<1>& layout, const T* x, T* out,
                  cudaStream_t stream) {
  using D = device_t<T>;
  using C = compute_t<D>;
  const UnaryFn<D> fn{op.op, static_cast<C>(op.s0), static_cast<C>(op.s1)};
  launch_map<1>(layout, dev(out), std::array<const D*, 1>{dev(x)}, fn, stream);
}

template <typename T>
void launch_binary(PointwiseOp<BinaryOp> op, const ElementwiseLayout<2>& layout, const T* a, const T* b, T* out,
                   cudaStream_t stream) {
  using D = device_t<T>;
  using C = compute_t<D>;
  const BinaryFn<D> fn{op.op, static_cast<C>(op.s0), static_cast<C>(op.s1)};
  launch_map<2>(layout, dev(out), std::array<const D*, 2>{dev(a), dev(b)}, fn, stream);
}

template <typename T>
void launch_ternary(PointwiseOp<TernaryOp> op, const ElementwiseLayout<3>& layout, const T* a, const T* b, const T* c,
                    T* out, cudaStream_t stream) {
  using D = device_t<T>;
  using C = compute_t<D>;
  const TernaryFn<D> fn{op.op, static_cast<C>(op.s0)};
  launch_map<3>(layout, dev(out), std::array<const D*, 3>{dev(a), dev(b), dev(c)}, fn, stream);
}

template <typename T>
void launch_compare(CompareOp op, const ElementwiseLayout<2>& layout, const T* a, const T* b, bool* out,
                    cudaStream_t stream) {
  using D = device_t<T>;
  launch_map<2>(layout, out, std::array<const D*, 2>{dev(a), dev(b)}, CompareFn<D>{op}, stream);
}

void launch_select(int elem_size, const ElementwiseLayout<3>& layout, const bool* cond, const void* a, const void* b,
                   void* out, cudaStream_t stream) {
  if (layout.numel == 0) return;
  switch (elem_size) {
    case 1: return launch_select_bits<uint8_t>(layout, cond, a, b, out, stream);
    case 2: return launch_select_bits<uint16_t>(layout, cond, a, b, out, stream);
    case 4: return launch_select_bits<uint32_t>(layout, cond, a, b, out, stream);
    case 8: return launch_select_bits<uint64_t>(layout, cond, a, b, out, stream);
    default: MT_THROW("launch_select: unsupported element size ", elem_size);
  }
}

#define MT_INSTANTIATE_FLOATING(T)                                                                                   \
  template void launch_unary<T>(PointwiseOp<UnaryOp>, const ElementwiseLayout<1>&, const T*, T*, cudaStream_t);      \
  template void launch_binary<T>(PointwiseOp<BinaryOp>, const ElementwiseLayout<2>&, const T*, const T*, T*,         \
                                 cudaStream_t);                                                                      \
  template void launch_ternary<T>(PointwiseOp<TernaryOp>, const ElementwiseLayout<3>&, const T*, const T*, const T*, \
                                  T*, cudaStream_t);
MT_INSTANTIATE_FLOATING(float)
MT_INSTANTIATE_FLOATING(double)
MT_INSTANTIATE_FLOATING(Half)
MT_INSTANTIATE_FLOATING(BFloat16)
#undef MT_INSTANTIATE_FLOATING

#define MT_INSTANTIATE_COMPARE(T) \
  template void launch_compare<T>(CompareOp, const ElementwiseLayout<2>&, const T*, const T*, bool*, cudaStream_t);
MT_INSTANTIATE_COMPARE(float)
MT_INSTANTIATE_COMPARE(double)
MT_INSTANTIATE_COMPARE(Half)
MT_INSTANTIATE_COMPARE(BFloat16)
MT_INSTANTIATE_COMPARE(int64_t)
MT_INSTANTIATE_COMPARE(int32_t)
MT_INSTANTIATE_COMPARE(bool)
#undef MT_INSTANTIATE_COMPARE

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above), the CUDA side of ops/elementwise/typed_entries.h: device
// and dtype checks, broadcasting, the host-planned layout (ops/elementwise/elementwise_plan.h) and the launch on the
// tensors' device's current stream.
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
