// Device-side helpers shared by the .cu kernels: mantissa's host scalar types mapped onto CUDA's
// (bit-identical), loads that widen to the compute type, stores that round once (to nearest even),
// warp and block sums. Included by .cu files only.
#pragma once

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "framework/dtype.h"
#include "framework/half.h"

namespace mantissa {

// The compute type (framework/dtype.h's compute_t) of CUDA's 16-bit storage types too, so that kernels
// over device types name it as the CPU kernels do: float for __half and __nv_bfloat16.
template <>
struct compute_type<__half> {
  using type = float;
};
template <>
struct compute_type<__nv_bfloat16> {
  using type = float;
};

}  // namespace mantissa

namespace mantissa::gpu {

template <typename T>
struct device_type {
  using type = T;
};
template <>
struct device_type<Half> {
  using type = __half;
};
template <>
struct device_type<BFloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using device_t = typename device_type<T>::type;

template <typename T>
const device_t<T>* dev(const T* p) {
  return reinterpret_cast<const device_t<T>*>(p);
}
template <typename T>
device_t<T>* dev(T* p) {
  return reinterpret_cast<device_t<T>*>(p);
}

template <typename D>
__device__ __forceinline__ compute_t<D> load(D v) {
  if constexpr (std::is_same_v<D, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}
template <typename D, typename C>
__device__ __forceinline__ D store(C v) {
  if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<D>(v);
  }
}

// V elements of T, aligned as one (up to 16-byte) memory transaction.
template <typename T, int V>
struct alignas(sizeof(T) * V) AlignedArray {
  T v[V];
};

// Sum over a full warp (all 32 lanes must call it). There is deliberately no warp_max: fmax drops a NaN
// operand, which would lose a NaN that the CPU's max keeps; the max reduction and softmax carry their own
// NaN rules (reduce_plan.h's max_wins, row_math.h's MaxSum).
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total. The
// order is fixed by the geometry, so a launch is deterministic. `scratch` holds 32 values.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : A(0);
  return warp_sum(v);
}

// Sum over a row of TPR threads: one warp (TPR == 32) or the whole block (TPR == blockDim.x); every thread
// of the row gets the total, added in an order fixed by the geometry.
template <int TPR, typename A>
__device__ __forceinline__ A row_sum(A v) {
  static_assert(TPR == 32 || (TPR > 32 && TPR % 32 == 0 && TPR <= 1024), "a row is a warp or a whole block");
  if constexpr (TPR == 32) {
    return warp_sum(v);
  } else {
    __shared__ A scratch[32];
    return block_sum(v, scratch);
  }
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ int64_t global_thread() { return int64_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return int64_t{gridDim.x} * blockDim.x; }

}  // namespace mantissa::gpu
