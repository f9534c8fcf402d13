// Multi-tensor apply, the device half (included by the .cu files of optim/cuda only): a block's chunk
// of its tensor, the chunk walked with 16-byte vector accesses when every pointer allows it, and the
// storage formats of f32, f16 and bf16 tensors (16-bit values as raw bits, converted with round-to-
// nearest-even so results equal the CPU's bit for bit).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <span>
#include <type_traits>
#include <vector>

#include "framework/cuda/check.h"
#include "optim/multi_tensor.h"

namespace mantissa::gpu::mta {

inline constexpr int kThreads = 512;  // per block: a 64 K chunk is 32 rounds of float4 per thread

// [begin, end) of the chunk block `blockIdx.x` works on, and its tensor's slot in the list.
struct BlockChunk {
  int tensor;
  int64_t begin, end;
};
template <int kDepth>
__device__ inline BlockChunk block_chunk(const multi_tensor::TensorListMeta<kDepth>& meta) {
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t begin = int64_t{meta.block_chunk[blockIdx.x]} * multi_tensor::kChunkSize;
  const int64_t end = begin + multi_tensor::kChunkSize;
  return {t, begin, end < meta.n[t] ? end : meta.n[t]};
}

// Storage of an element type: Raw is what memory holds, load/store convert to and from f32.
enum class Storage { kF32, kF16, kBF16 };
template <Storage S>
struct Format;
template <>
struct Format<Storage::kF32> {
  using Raw = float;
  __device__ static float load(float x) { return x; }
  __device__ static float store(float x) { return x; }
};
template <>
struct Format<Storage::kF16> {
  using Raw = uint16_t;
  __device__ static float load(uint16_t x) { return __half2float(__ushort_as_half(x)); }
  __device__ static uint16_t store(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <>
struct Format<Storage::kBF16> {
  using Raw = uint16_t;
  __device__ static float load(uint16_t x) { return __bfloat162float(__ushort_as_bfloat16(x)); }
  __device__ static uint16_t store(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};

// W consecutive values moved as one access (W * sizeof(T) bytes, aligned to that).
template <typename T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};
template <int W, typename T>
__device__ inline void load(const T* p, int64_t i, T (&out)[W]) {
  const Pack<T, W> pack = *reinterpret_cast<const Pack<T, W>*>(p + i);
#pragma unroll
  for (int k = 0; k < W; ++k) out[k] = pack.v[k];
}
template <int W, typename T>
__device__ inline void store(T* p, int64_t i, const T (&in)[W]) {
  Pack<T, W> pack;
#pragma unroll
  for (int k = 0; k < W; ++k) pack.v[k] = in[k];
  *reinterpret_cast<Pack<T, W>*>(p + i) = pack;
}

__device__ inline bool aligned_to(const void* p, uintptr_t bytes) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <int W>
using Width = std::integral_constant<int, W>;

// Walks [begin, end) with the block's threads: f(i, Width<kVec>) for kVec elements from i (the caller's
// pointers are aligned for that), then f(i, Width<1>) for the rest. A chunk starts at a multiple of
// kChunkSize, so the vector part is aligned whenever the tensor's base pointers are.
template <int kVec, typename F>
__device__ inline void for_chunk(int64_t begin, int64_t end, bool vector_ok, F&& f) {
  int64_t tail = begin;
  if (vector_ok) {
    tail = begin + (end - begin) / kVec * kVec;
    for (int64_t i = begin + int64_t{threadIdx.x} * kVec; i < tail; i += int64_t{blockDim.x} * kVec)
      f(i, Width<kVec>{});
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += blockDim.x) f(i, Width<1>{});
}

// Runs launch(meta, blocks) for each planned launch over tensors whose d-th pointers are ptrs[d].
template <int kDepth, typename LaunchFn>
void for_each_launch(const std::vector<void*> (&ptrs)[kDepth], std::span<const int64_t> sizes, LaunchFn&& launch) {
  const auto launches = multi_tensor::plan(sizes, {.max_tensors = multi_tensor::max_tensors(kDepth)});
  for (const auto& l : launches) {
    multi_tensor::TensorListMeta<kDepth> meta{};
    multi_tensor::fill_meta(l, ptrs, sizes, meta);
    launch(meta, static_cast<unsigned>(l.blocks.size()));
    MT_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace mantissa::gpu::mta
