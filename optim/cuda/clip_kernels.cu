// clip_grad_norm_'s kernels: the partials of every grad (one CUDA block per 64 K chunk, i.e. four norm
// blocks), their combination into the total and the coefficient (one block), and the scaling of the grads,
// which reads the coefficient on the device. Every sum runs in optim/norm_order.h's order.
#include "optim/cuda/clip_kernels.h"
#include "optim/cuda/multi_tensor_apply.cuh"
#include "optim/norm_order.h"

namespace mantissa::gpu {
namespace {

namespace order = norm_order;

// Level 1 of the order: thread t owns the four neighbouring lanes 4t .. 4t + 3 of each norm block, so one
// 16-byte load (f32) or two (f64) feed all of them.
constexpr int kLanesPerThread = 4;
static_assert(order::kBlockLanes == mta::kThreads * kLanesPerThread, "one thread per four lanes of a block");
static_assert(multi_tensor::kChunkSize % order::kBlock == 0, "a chunk holds whole norm blocks");
static_assert(order::kBlockLanes >= 64 && order::kTotalLanes >= 64, "fold_shared ends with a warp's five levels");

// The partials' pointer slots: the grad, and where its first partial goes.
enum PartialSlot { kPartialGrad, kPartialOut, kPartialDepth };
static_assert(sizeof(multi_tensor::TensorListMeta<kPartialDepth>) <= multi_tensor::kKernelParamBytes);

template <cpu::NormPartial kWhat>
__device__ inline double step(double acc, double x) {
  if constexpr (kWhat == cpu::NormPartial::kSumSquares) {
    return order::add_square(acc, x);
  } else {
    return order::max_nan(acc, fabs(x));
  }
}

template <cpu::NormPartial kWhat>
__device__ inline double combine(double a, double b) {
  if constexpr (kWhat == cpu::NormPartial::kSumSquares) {
    return rn::add(a, b);
  } else {
    return order::max_nan(a, b);
  }
}

// fold() of norm_order.h over `lanes` values in shared memory; the whole block calls it after writing them.
// Levels down to 32 pairs run across the block, one barrier each; the last five run in warp 0 with
// shuffles, where lane j takes lane j + h's value: the same pairs. Thread 0 then holds the result in s[0].
template <cpu::NormPartial kWhat>
__device__ inline void fold_shared(double* s, int lanes) {
  __syncthreads();
  for (int h = lanes / 2; h >= 32; h /= 2) {
    for (int j = static_cast<int>(threadIdx.x); j < h; j += static_cast<int>(blockDim.x)) {
      s[j] = combine<kWhat>(s[j], s[j + h]);
    }
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    double v = s[threadIdx.x];
#pragma unroll
    for (int h = 16; h >= 1; h /= 2) v = combine<kWhat>(v, __shfl_down_sync(0xffffffffu, v, h));
    if (threadIdx.x == 0) s[0] = v;
  }
}

// The values at i .. i + 3 of a norm block ending at `end`, widened to f64; 0 past the end (it adds nothing
// to a sum of squares or to a max of magnitudes).
template <typename T>
__device__ inline void load_lanes(const T* g, int64_t i, int64_t end, bool vector_ok, double (&v)[kLanesPerThread]) {
  if (vector_ok && i + kLanesPerThread <= end) {
    constexpr int kVec = 16 / sizeof(T);
    T x[kVec];
#pragma unroll
    for (int part = 0; part < kLanesPerThread / kVec; ++part) {
      mta::load<kVec>(g, i + part * kVec, x);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[part * kVec + k] = static_cast<double>(x[k]);
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < kLanesPerThread; ++k) v[k] = i + k < end ? static_cast<double>(g[i + k]) : 0.0;
}

template <typename T, cpu::NormPartial kWhat>
__global__ void __launch_bounds__(mta::kThreads)
    partials_kernel(const multi_tensor::TensorListMeta<kPartialDepth> meta) {
  __shared__ double lanes[order::kBlockLanes];
  const mta::BlockChunk c = mta::block_chunk(meta);
  const T* g = static_cast<const T*>(meta.ptr[kPartialGrad][c.tensor]);
  double* out = static_cast<double*>(meta.ptr[kPartialOut][c.tensor]);
  // A chunk starts at a multiple of kBlockLanes, so the lanes' loads are aligned when the grad's start is.
  const bool vector_ok = mta::aligned_to(g, 16);
  const int first = static_cast<int>(threadIdx.x) * kLanesPerThread;
  for (int64_t block = c.begin; block < c.end; block += order::kBlock) {
    const int64_t end = block + order::kBlock < c.end ? block + order::kBlock : c.end;
    double acc[kLanesPerThread] = {};
#pragma unroll 4
    for (int64_t i = block + first; i < end; i += order::kBlockLanes) {  // 8 rounds in a full block
      double v[kLanesPerThread];
      load_lanes(g, i, end, vector_ok, v);
#pragma unroll
      for (int k = 0; k < kLanesPerThread; ++k) acc[k] = step<kWhat>(acc[k], v[k]);
    }
#pragma unroll
    for (int k = 0; k < kLanesPerThread; ++k) lanes[first + k] = acc[k];
    fold_shared<kWhat>(lanes, order::kBlockLanes);
    // Thread 0 alone reads lanes[0] and alone writes it for the next block: no barrier needed here.
    if (threadIdx.x == 0) out[block / order::kBlock] = lanes[0];
  }
}

// Level 2: thread t is lane t of all the partials.
template <cpu::NormPartial kWhat>
__global__ void __launch_bounds__(order::kTotalLanes)
    combine_kernel(const double* partials, int64_t count, double max_norm, double* total, double* coef) {
  __shared__ double lanes[order::kTotalLanes];
  double acc = 0.0;
  for (int64_t p = threadIdx.x; p < count; p += order::kTotalLanes) acc = combine<kWhat>(acc, partials[p]);
  lanes[threadIdx.x] = acc;
  fold_shared<kWhat>(lanes, order::kTotalLanes);
  if (threadIdx.x == 0) {
    const double norm = kWhat == cpu::NormPartial::kSumSquares ? rn::sqrt(lanes[0]) : lanes[0];
    *total = norm;
    *coef = order::clip_coefficient(norm, max_norm);
  }
}

template <typename T>
__global__ void __launch_bounds__(mta::kThreads)
    scale_kernel(const multi_tensor::TensorListMeta<1> meta, const double* coef) {
  const double c64 = *coef;
  if (!(c64 < 1.0)) return;              // uniform: no clipping needed, or the total was not finite
  const T factor = static_cast<T>(c64);  // rounded once to the grads' dtype, as cpu::scale does
  const mta::BlockChunk c = mta::block_chunk(meta);
  T* g = static_cast<T*>(meta.ptr[0][c.tensor]);
  constexpr int kVec = 16 / sizeof(T);
  mta::for_chunk<kVec>(c.begin, c.end, mta::aligned_to(g, 16), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    T x[W];
    mta::load<W>(g, i, x);
#pragma unroll
    for (int k = 0; k < W; ++k) x[k] = rn::mul(x[k], factor);
    mta::store<W>(g, i, x);
  });
}

template <typename F>
void with_dtype(ClipDType dtype, F&& f) {
  switch (dtype) {
    case ClipDType::kF32: return f(float{});
    case ClipDType::kF64: return f(double{});
  }
}

}  // namespace

void norm_partials(std::span<void* const> grads, std::span<const int64_t> sizes, std::span<double* const> partials_out,
                   ClipDType dtype, cpu::NormPartial what, cudaStream_t stream) {
  MT_CHECK(grads.size() == sizes.size() && grads.size() == partials_out.size(),
           "clip_grad_norm_ (CUDA): ", grads.size(), " grads, ", sizes.size(), " sizes, ", partials_out.size(),
           " partial outputs");
  if (grads.empty()) return;
  const std::vector<void*> ptrs[kPartialDepth] = {std::vector<void*>(grads.begin(), grads.end()),
                                                  std::vector<void*>(partials_out.begin(), partials_out.end())};
  with_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    mta::for_each_launch<kPartialDepth>(
        ptrs, sizes, [&](const multi_tensor::TensorListMeta<kPartialDepth>& meta, unsigned blocks) {
          if (what == cpu::NormPartial::kSumSquares) {
            partials_kernel<T, cpu::NormPartial::kSumSquares><<<blocks, mta::kThreads, 0, stream>>>(meta);
          } else {
            partials_kernel<T, cpu::NormPartial::kMaxAbs><<<blocks, mta::kThreads, 0, stream>>>(meta);
          }
        });
  });
}

void combine_partials(const double* partials, int64_t count, cpu::NormPartial what, double max_norm, double* total,
                      double* coef, cudaStream_t stream) {
  if (what == cpu::NormPartial::kSumSquares) {
    combine_kernel<cpu::NormPartial::kSumSquares>
        <<<1, order::kTotalLanes, 0, stream>>>(partials, count, max_norm, total, coef);
  } else {
    combine_kernel<cpu::NormPartial::kMaxAbs>
        <<<1, order::kTotalLanes, 0, stream>>>(partials, count, max_norm, total, coef);
  }
  MT_CUDA_CHECK(cudaGetLastError());
}

void scale_by_coefficient(std::span<void* const> grads, std::span<const int64_t> sizes, ClipDType dtype,
                          const double* coef, cudaStream_t stream) {
  MT_CHECK(grads.size() == sizes.size(), "clip_grad_norm_ (CUDA): ", grads.size(), " grads, ", sizes.size(), " sizes");
  if (grads.empty()) return;
  const std::vector<void*> ptrs[1] = {std::vector<void*>(grads.begin(), grads.end())};
  with_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    mta::for_each_launch<1>(ptrs, sizes, [&](const multi_tensor::TensorListMeta<1>& meta, unsigned blocks) {
      scale_kernel<T><<<blocks, mta::kThreads, 0, stream>>>(meta, coef);
    });
  });
}

}  // namespace mantissa::gpu
