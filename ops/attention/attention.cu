// Fused attention on CUDA (written and compiled; it has never run on a GPU). A warp owns one row: in the
// forward a query row, whose scores it makes one key at a time (a dot product over the warp's lanes) and
// folds into an online max/sum and output accumulator, so no score is stored; in the backward first a
// query row (dQ, and delta = rowsum(dO * O)), then, in a second kernel on the same stream, a key row (dK,
// dV), each recomputing the weights from the saved log-sum-exp. Head dims up to 8 per lane (256). This
// is the straightforward schedule, for correctness against the CPU kernel first; a tiled tensor-core
// kernel (or cuDNN's SDPA graph) is the faster one and is not written. Scores, softmax and accumulation
// are in f32 (f64 for f64); the dropout factors come from ops/attention/attention_math.h, the same words
// as the CPU draws.
#include "framework/cuda/check.h"
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"
#include "ops/attention/attention_cuda.h"
#include "ops/cuda/device_types.cuh"
#include "ops/pointwise_math.h"

namespace mantissa::gpu {
namespace {

constexpr int kPerLane = 8;  // head dims up to 32 * 8
constexpr int kWarpsPerBlock = 4;

template <typename D>
struct Operands {
  const D* q;
  AttentionRows q_rows;
  const D* k;
  AttentionRows k_rows;
  const D* v;
  AttentionRows v_rows;
};

// dims of row `row` of x held by this lane: element lane + 32 e.
template <typename D, typename C>
__device__ __forceinline__ void load_lane(const D* x, int64_t dims, C (&r)[kPerLane]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    r[e] = d < dims ? load(x[d]) : C(0);
  }
}

template <typename D, typename C>
__device__ __forceinline__ C dot_lane(const C (&a)[kPerLane], const D* x, int64_t dims) {
  const int lane = threadIdx.x & 31;
  C part = 0;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < dims) part += a[e] * load(x[d]);
  }
  return warp_sum(part);
}

template <typename D, typename C>
__device__ __forceinline__ void store_lane(const C (&r)[kPerLane], C factor, int64_t dims, D* x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < dims) x[d] = store<D>(r[e] * factor);
  }
}

// The weights and their gradient as the 16-bit GEMM operands the CPU kernel rounds them to (identity for
// f32 and f64): attention_cpu.cc's round_operands.
template <typename D, typename C>
__device__ __forceinline__ C operand(C x) {
  return load(store<D>(x));
}

__device__ __forceinline__ int64_t warp_row() { return int64_t{blockIdx.x} * kWarpsPerBlock + (threadIdx.x >> 5); }

template <typename C>
__device__ __forceinline__ C drop_factor(const AttentionDropout& drop, const AttentionShape& s, int64_t n, int64_t i,
                                         int64_t j) {
  return drop.active() ? static_cast<C>(drop.factor(static_cast<uint64_t>((n * s.L + i) * s.S + j))) : C(1);
}

template <typename D>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    attention_forward_kernel(AttentionShape s, compute_t<D> scale, AttentionDropout drop, Operands<D> x,
                             D* __restrict__ out, compute_t<D>* __restrict__ lse) {
  using C = compute_t<D>;
  const int64_t row = warp_row();
  if (row >= s.N * s.L) return;  // whole warps leave together: N * L rows, one per warp
  const int64_t n = row / s.L, i = row % s.L;
  C q[kPerLane], acc[kPerLane];
  load_lane(x.q + x.q_rows.offset(n, i), s.D, q);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0;
  C m = -static_cast<C>(INFINITY), l = 0;
  const int64_t seen = s.visible_keys(i);
  for (int64_t j = 0; j < seen; ++j) {
    const C score = dot_lane(q, x.k + x.k_rows.offset(n, j), s.D) * scale;
    const C m_new = score > m || score != score ? score : m;  // a NaN sticks
    if (m_new == -static_cast<C>(INFINITY)) continue;         // nothing but -inf so far
    const C alpha = hd_exp(m - m_new), p = hd_exp(score - m_new);
    l = l * alpha + p;
    m = m_new;
    const C w = operand<D>(p * drop_factor<C>(drop, s, n, i, j));
    C vj[kPerLane];
    load_lane(x.v + x.v_rows.offset(n, j), s.Dv, vj);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = acc[e] * alpha + w * vj[e];
  }
  store_lane(acc, C(1) / l, s.Dv, out + row * s.Dv);
  if ((threadIdx.x & 31) == 0) lse[row] = m + hd_log(l);
}

// dQ for one query row, and delta = rowsum(dO * O) for the key-row kernel.
template <typename D>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    attention_dq_kernel(AttentionShape s, compute_t<D> scale, AttentionDropout drop, Operands<D> x,
                        const D* __restrict__ out, const compute_t<D>* __restrict__ lse, const D* __restrict__ dout,
                        compute_t<D>* __restrict__ delta, D* __restrict__ dq) {
  using C = compute_t<D>;
  const int64_t row = warp_row();
  if (row >= s.N * s.L) return;
  const int64_t n = row / s.L, i = row % s.L;
  C q[kPerLane], g[kPerLane], acc[kPerLane];
  load_lane(x.q + x.q_rows.offset(n, i), s.D, q);
  load_lane(dout + row * s.Dv, s.Dv, g);
  const C di = dot_lane(g, out + row * s.Dv, s.Dv);
  if ((threadIdx.x & 31) == 0) delta[row] = di;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0;
  const int64_t seen = s.visible_keys(i);
  for (int64_t j = 0; j < seen; ++j) {
    const D* kj = x.k + x.k_rows.offset(n, j);
    const C p = hd_exp(dot_lane(q, kj, s.D) * scale - lse[row]);
    const C dp = dot_lane(g, x.v + x.v_rows.offset(n, j), s.Dv) * drop_factor<C>(drop, s, n, i, j);
    const C ds = operand<D>(p * (dp - di)) * scale;
    C kv[kPerLane];
    load_lane(kj, s.D, kv);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] += ds * kv[e];
  }
  store_lane(acc, C(1), s.D, dq + row * s.D);
}

// dK and dV for one key row, over the query rows that see it.
template <typename D>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    attention_dkv_kernel(AttentionShape s, compute_t<D> scale, AttentionDropout drop, Operands<D> x,
                         const compute_t<D>* __restrict__ lse, const D* __restrict__ dout,
                         const compute_t<D>* __restrict__ delta, D* __restrict__ dk, D* __restrict__ dv) {
  using C = compute_t<D>;
  const int64_t row = warp_row();
  if (row >= s.N * s.S) return;
  const int64_t n = row / s.S, j = row % s.S;
  C kj[kPerLane], vj[kPerLane], gk[kPerLane], gv[kPerLane];
  load_lane(x.k + x.k_rows.offset(n, j), s.D, kj);
  load_lane(x.v + x.v_rows.offset(n, j), s.Dv, vj);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) gk[e] = gv[e] = 0;
  for (int64_t i = s.causal ? j : 0; i < s.L; ++i) {
    const D* qi = x.q + x.q_rows.offset(n, i);
    const D* doi = dout + (n * s.L + i) * s.Dv;
    const C p = hd_exp(dot_lane(kj, qi, s.D) * scale - lse[n * s.L + i]);
    const C f = drop_factor<C>(drop, s, n, i, j);
    const C dp = dot_lane(vj, doi, s.Dv) * f;
    const C ds = operand<D>(p * (dp - delta[n * s.L + i])) * scale;
    const C w = operand<D>(p * f);
    C qv[kPerLane], gv_i[kPerLane];
    load_lane(qi, s.D, qv);
    load_lane(doi, s.Dv, gv_i);
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      gv[e] += w * gv_i[e];
      gk[e] += ds * qv[e];
    }
  }
  store_lane(gk, C(1), s.D, dk + row * s.D);
  store_lane(gv, C(1), s.Dv, dv + row * s.Dv);
}

int blocks_for(int64_t rows) { return static_cast<int>(ceil_div(rows, kWarpsPerBlock)); }

template <typename T>
Operands<device_t<T>> operands(const AttentionProblem& p) {
  return {dev(p.q.data<T>()), p.q_rows, dev(p.k.data<T>()), p.k_rows, dev(p.v.data<T>()), p.v_rows};
}

void check_head_dims(const AttentionShape& s) {
  MT_CHECK(s.D <= 32 * kPerLane && s.Dv <= 32 * kPerLane, "scaled_dot_product_attention: the CUDA kernel takes head ",
           "dims up to ", 32 * kPerLane, ", got D ", s.D, " and Dv ", s.Dv);
}

}  // namespace
}  // namespace mantissa::gpu

namespace mantissa {

void cuda_attention_forward(const AttentionProblem& p) {
  gpu::check_head_dims(p.shape);
  gpu::DeviceGuard guard(p.q.device());
  dispatch_floating(p.q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    using D = gpu::device_t<T>;
    using C = compute_t<D>;
    gpu::attention_forward_kernel<D>
        <<<gpu::blocks_for(p.shape.N * p.shape.L), 32 * gpu::kWarpsPerBlock, 0, gpu::current_stream(p.q.device())>>>(
            p.shape, static_cast<C>(p.scale), p.dropout, gpu::operands<T>(p), gpu::dev(p.out.data<T>()),
            p.lse.data<C>());
    MT_CUDA_LAUNCH_CHECK("attention_forward_kernel");
  });
}

void cuda_attention_backward(const AttentionProblem& p, const AttentionGrads& g) {
  gpu::check_head_dims(p.shape);
  gpu::DeviceGuard guard(p.q.device());
  const Tensor delta = empty(p.lse.shape(), {.dtype = p.lse.dtype(), .device = p.lse.device()});
  dispatch_floating(p.q.dtype(), "ScaledDotProductAttentionBackward", [&]<typename T>() {
    using D = gpu::device_t<T>;
    using C = compute_t<D>;
    const cudaStream_t stream = gpu::current_stream(p.q.device());
    const int threads = 32 * gpu::kWarpsPerBlock;
    gpu::attention_dq_kernel<D><<<gpu::blocks_for(p.shape.N * p.shape.L), threads, 0, stream>>>(
        p.shape, static_cast<C>(p.scale), p.dropout, gpu::operands<T>(p), gpu::dev(p.out.data<T>()), p.lse.data<C>(),
        gpu::dev(g.dout.data<T>()), delta.data<C>(), gpu::dev(g.dq.data<T>()));
    MT_CUDA_LAUNCH_CHECK("attention_dq_kernel");
    gpu::attention_dkv_kernel<D><<<gpu::blocks_for(p.shape.N * p.shape.S), threads, 0, stream>>>(
        p.shape, static_cast<C>(p.scale), p.dropout, gpu::operands<T>(p), p.lse.data<C>(), gpu::dev(g.dout.data<T>()),
        delta.data<C>(), gpu::dev(g.dk.data<T>()), gpu::dev(g.dv.data<T>()));
    MT_CUDA_LAUNCH_CHECK("attention_dkv_kernel");
  });
}

}  // namespace mantissa
