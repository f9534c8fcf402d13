// CUDA reductions. Row mode: a warp per (output, slice) with lanes on consecutive reduced elements and a
// shuffle tree at the end; column mode: a thread per (output, slice) walking its slice, neighbouring
// threads on neighbouring outputs (bias gradients: [rows, cols] summed over rows). Slices, when the
// outputs are too few to fill the GPU, go to a workspace that a final pass adds up in slice order.
#include <cuda_runtime_api.h>
#include <limits>

#include "framework/autograd.h"
#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/elementwise_plan.h"
#include "ops/reduce/reduce_cuda.h"
#include "ops/reduce/reduce_plan.h"

namespace mantissa::gpu {
namespace {

template <typename I>
struct ReduceCalc {
  OffsetCalc<1, I> kept, reduced;
  __device__ __forceinline__ I kept_offset(I o) const {
    I off[1];
    kept.offsets(o, off);
    return off[0];
  }
  __device__ __forceinline__ I reduced_offset(I r) const {
    I off[1];
    reduced.offsets(r, off);
    return off[0];
  }
};

bool reduce_fits_32bit(const ReduceLayout& l) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  int64_t span = 0;
  for (const ElementwiseLayout<1>* p : {&l.kept, &l.reduced}) {
    for (int d = 0; d < p->ndim; ++d) {
      if (p->strides[0][d] < 0) return false;
      span += (p->sizes[d] - 1) * p->strides[0][d];
    }
  }
  return span < kLimit && l.n_out < kLimit && l.n_red < kLimit;
}

// Accumulates x over reduced elements [r0, r1) of output o, starting at `first` and stepping by `step`.
template <typename D, typename A, typename I>
__device__ __forceinline__ A sum_slice(const D* x, const ReduceCalc<I>& c, I base, int64_t first, int64_t r1,
                                       int64_t step) {
  A acc = 0;
  for (int64_t r = first; r < r1; r += step) acc += static_cast<A>(load(x[base + c.reduced_offset(static_cast<I>(r))]));
  return acc;
}

template <typename D, typename A, typename I>
__global__ void sum_rows_kernel(const D* __restrict__ x, ReduceCalc<I> c, int64_t n_out, int64_t n_red, int64_t splits,
                                int64_t chunk, A scale, A* __restrict__ workspace, D* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_grid = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t w = int64_t{blockIdx.x} * (blockDim.x >> 5) + (threadIdx.x >> 5); w < n_out * splits;
       w += warps_per_grid) {
    const int64_t o = w / splits, s = w - o * splits;
    const int64_t r0 = s * chunk, r1 = min(n_red, r0 + chunk);
    A acc = sum_slice<D, A, I>(x, c, c.kept_offset(static_cast<I>(o)), r0 + lane, r1, 32);
    acc = warp_sum(acc);
    if (lane == 0) {
      if (splits == 1) {
        out[o] = store<D>(acc * scale);
      } else {
        workspace[w] = acc;
      }
    }
  }
}

template <typename D, typename A, typename I>
__global__ void sum_columns_kernel(const D* __restrict__ x, ReduceCalc<I> c, int64_t n_out, int64_t n_red,
                                   int64_t splits, int64_t chunk, A scale, A* __restrict__ workspace,
                                   D* __restrict__ out) {
  const int64_t s = blockIdx.y;
  const int64_t r0 = s * chunk, r1 = min(n_red, r0 + chunk);
  for (int64_t o = global_thread(); o < n_out; o += grid_threads()) {
    const A acc = sum_slice<D, A, I>(x, c, c.kept_offset(static_cast<I>(o)), r0, r1, 1);
    if (splits == 1) {
      out[o] = store<D>(acc * scale);
    } else {
      workspace[o * splits + s] = acc;
    }
  }
}

// out[o] = scale * (workspace[o, 0] + workspace[o, 1] + ...), in slice order.
template <typename D, typename A>
__global__ void sum_slices_kernel(const A* __restrict__ workspace, int64_t n_out, int64_t splits, A scale,
                                  D* __restrict__ out) {
  for (int64_t o = global_thread(); o < n_out; o += grid_threads()) {
    A acc = 0;
    for (int64_t s = 0; s < splits; ++s) acc += workspace[o * splits + s];
    out[o] = store<D>(acc * scale);
  }
}

template <typename D, typename I>
void launch_sum_typed(const ReduceLayout& l, const ReduceGeometry& g, double scale, const D* x, void* workspace, D* out,
                      cudaStream_t stream) {
  using A = std::conditional_t<std::is_same_v<D, double>, double, float>;
  const ReduceCalc<I> c{make_offset_calc<I>(l.kept), make_offset_calc<I>(l.reduced)};
  A* ws = static_cast<A*>(workspace);
  const A s = static_cast<A>(scale);
  if (g.mode == ReduceMode::kRows) {
    sum_rows_kernel<D, A, I>
        <<<g.blocks_x, g.threads, 0, stream>>>(x, c, l.n_out, l.n_red, g.splits, g.chunk, s, ws, out);
    MT_CUDA_LAUNCH_CHECK("sum_rows_kernel");
  } else {
    sum_columns_kernel<D, A, I>
        <<<dim3(g.blocks_x, g.blocks_y), g.threads, 0, stream>>>(x, c, l.n_out, l.n_red, g.splits, g.chunk, s, ws, out);
    MT_CUDA_LAUNCH_CHECK("sum_columns_kernel");
  }
  if (g.splits > 1) {
    const LaunchGeometry f = elementwise_geometry(l.n_out);
    sum_slices_kernel<D, A><<<f.blocks, f.threads, 0, stream>>>(ws, l.n_out, g.splits, s, out);
    MT_CUDA_LAUNCH_CHECK("sum_slices_kernel");
  }
}

// ---- max ----

template <typename D, typename I>
__global__ void max_rows_kernel(const D* __restrict__ x, ReduceCalc<I> c, int64_t n_out, int64_t n_red,
                                D* __restrict__ values, int64_t* __restrict__ indices) {
  using C = compute_t<D>;
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_grid = int64_t{gridDim.x} * (blockDim.x >> 5);
  for (int64_t o = int64_t{blockIdx.x} * (blockDim.x >> 5) + (threadIdx.x >> 5); o < n_out; o += warps_per_grid) {
    const I base = c.kept_offset(static_cast<I>(o));
    C best = load(x[base]);
    int64_t bi = 0;
    for (int64_t r = lane; r < n_red; r += 32) {
      const C v = load(x[base + c.reduced_offset(static_cast<I>(r))]);
      if (max_wins(v, r, best, bi) || r == lane) {  // the lane's first element seeds it
        best = v;
        bi = r;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const C ov = __shfl_xor_sync(0xffffffffu, best, offset);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, offset);
      const bool other_valid = oi < n_red, mine_valid = bi < n_red;
      if (other_valid && (!mine_valid || max_wins(ov, oi, best, bi))) {
        best = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      values[o] = store<D>(best);
      indices[o] = bi;
    }
  }
}

template <typename D, typename I>
__global__ void max_columns_kernel(const D* __restrict__ x, ReduceCalc<I> c, int64_t n_out, int64_t n_red,
                                   D* __restrict__ values, int64_t* __restrict__ indices) {
  using C = compute_t<D>;
  for (int64_t o = global_thread(); o < n_out; o += grid_threads()) {
    const I base = c.kept_offset(static_cast<I>(o));
    C best = load(x[base]);
    int64_t bi = 0;
    for (int64_t r = 1; r < n_red; ++r) {
      const C v = load(x[base + c.reduced_offset(static_cast<I>(r))]);
      if (max_wins(v, r, best, bi)) {
        best = v;
        bi = r;
      }
    }
    values[o] = store<D>(best);
    indices[o] = bi;
  }
}

template <typename D, typename I>
void launch_max_typed(const ReduceLayout& l, const D* x, D* values, int64_t* indices, cudaStream_t stream) {
  const ReduceCalc<I> c{make_offset_calc<I>(l.kept), make_offset_calc<I>(l.reduced)};
  if (l.rows()) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(l.n_out, 8), kMaxBlocks));
    max_rows_kernel<D, I><<<blocks, 256, 0, stream>>>(x, c, l.n_out, l.n_red, values, indices);
    MT_CUDA_LAUNCH_CHECK("max_rows_kernel");
  } else {
    const LaunchGeometry g = elementwise_geometry(l.n_out);
    max_columns_kernel<D, I><<<g.blocks, g.threads, 0, stream>>>(x, c, l.n_out, l.n_red, values, indices);
    MT_CUDA_LAUNCH_CHECK("max_columns_kernel");
  }
}

}  // namespace

// The split of a sum over `device`'s SMs; geometry.splits > 1 needs a workspace of
// n_out * splits accumulators (float, or double for f64).
ReduceGeometry sum_geometry(const ReduceLayout& layout, int device) {
  return plan_reduce_geometry(layout.n_out, layout.n_red, layout.rows(), multiprocessor_count(device));
}

// out[o] = scale * sum_r x[kept(o) + reduced(r)], rounded once to T.
template <typename T>
void launch_sum(const ReduceLayout& layout, const ReduceGeometry& geometry, double scale, const T* x, void* workspace,
                T* out, cudaStream_t stream) {
  if (layout.n_out == 0) return;
  if (reduce_fits_32bit(layout)) {
    launch_sum_typed<device_t<T>, uint32_t>(layout, geometry, scale, dev(x), workspace, dev(out), stream);
  } else {
    launch_sum_typed<device_t<T>, int64_t>(layout, geometry, scale, dev(x), workspace, dev(out), stream);
  }
}

// values[o], indices[o] = the first NaN, else the first maximum over the reduced elements (one dim).
// T: float, double, Half, BFloat16, int64_t, int32_t.
template <typename T>
void launch_max(const ReduceLayout& layout, const T* x, T* values, int64_t* indices, cudaStream_t stream) {
  if (layout.n_out == 0 || layout.n_red == 0) return;
  if (reduce_fits_32bit(layout)) {
    launch_max_typed<device_t<T>, uint32_t>(layout, dev(x), dev(values), indices, stream);
  } else {
    launch_max_typed<device_t<T>, int64_t>(layout, dev(x), dev(values), indices, stream);
  }
}

#define MT_INSTANTIATE_SUM(T) \
  template void launch_sum<T>(const ReduceLayout&, const ReduceGeometry&, double, const T*, void*, T*, cudaStream_t);
MT_INSTANTIATE_SUM(float)
MT_INSTANTIATE_SUM(double)
MT_INSTANTIATE_SUM(Half)
MT_INSTANTIATE_SUM(BFloat16)
#undef MT_INSTANTIATE_SUM

#define MT_INSTANTIATE_MAX(T) template void launch_max<T>(const ReduceLayout&, const T*, T*, int64_t*, cudaStream_t);
MT_INSTANTIATE_MAX(float)
MT_INSTANTIATE_MAX(double)
MT_INSTANTIATE_MAX(Half)
MT_INSTANTIATE_MAX(BFloat16)
MT_INSTANTIATE_MAX(int64_t)
MT_INSTANTIATE_MAX(int32_t)
#undef MT_INSTANTIATE_MAX

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launchers above), the CUDA side of ops/reduce/reduce.cc: the plan as the
// kernels' layout (ops/reduce/reduce_plan.h) and the launches on the input's device's current stream; var and max's
// backward are composed from device ops.
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
