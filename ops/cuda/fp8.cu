// FP8 kernels on CUDA (ops/cuda/fp8.h): the fused quantize pass, amax, and the scaled matmul's epilogue.
// Quantize: each thread takes 4 consecutive elements at a time (one 32-bit store of 4 FP8 bytes), folds max |x|
// as float bits (ops/fp8_math.h: nan's bits lie above inf's, so the integer maximum propagates nan) and counts
// overflows; the block reduces both with warp shuffles and one thread adds them to the results with atomicMax
// (on the bits) and atomicAdd. A maximum and a count do not depend on the order, so the results are the CPU's
// bits. The scale is read on the device: delayed scaling never waits for the host.
#include <algorithm>

#include "framework/cuda/check.h"
#include "framework/cuda/copy_math.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/fp8.h"
#include "ops/fp8_math.h"

namespace mantissa::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // enough resident warps to keep the loads in flight; the rest is grid-stride

// Maximum over the warp, then over the block; thread 0 gets the block's value. Integer shuffles: no nan rules.
__device__ __forceinline__ uint32_t block_max(uint32_t v, uint32_t* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0u;
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// One element: folds |x| into m; with kWrite, returns its FP8 byte and counts an overflow.
template <typename Format, bool kWrite>
__device__ __forceinline__ uint32_t quantize_one(float v, float scale, Fp8Overflow overflow, uint32_t& m,
                                                 uint32_t& count) {
  m = max(m, fp8::abs_bits(float_to_bits(v)));
  if constexpr (kWrite) {
    const uint32_t y = float_to_bits(v * scale);
    count += fp8::overflows<Format>(y) ? 1u : 0u;
    return Format::from_f32_bits(y, overflow);
  } else {
    return 0u;
  }
}

// kWrite: the quantize pass (out, amax, overflow); otherwise amax alone (scale, out, overflow unused).
template <typename S, typename Format, bool kWrite>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const S* __restrict__ x, int64_t n, const float* __restrict__ scale_ptr, Fp8Overflow overflow,
                    uint32_t* __restrict__ out4, uint32_t* __restrict__ amax_bits,
                    unsigned long long* __restrict__ overflow_count) {
  const float scale = kWrite ? *scale_ptr : 0.0f;
  uint32_t m = 0, count = 0;
  const int64_t quads = n / 4;
  for (int64_t q = global_thread(); q < quads; q += grid_threads()) {
    uint32_t packed = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = quantize_one<Format, kWrite>(widen(x[4 * q + j]), scale, overflow, m, count);
      packed |= byte << (8 * j);
    }
    if constexpr (kWrite) out4[q] = packed;
  }
  // The last n % 4 elements, one per thread of the first block.
  const int64_t i = 4 * quads + global_thread();
  if (i < n) {
    const uint32_t byte = quantize_one<Format, kWrite>(widen(x[i]), scale, overflow, m, count);
    if constexpr (kWrite) reinterpret_cast<uint8_t*>(out4)[i] = static_cast<uint8_t>(byte);
  }
  __shared__ uint32_t scratch[32];
  m = block_max(m, scratch);
  if constexpr (kWrite) count = block_sum(count, scratch);  // it syncs before reusing scratch
  if (threadIdx.x == 0) {
    if (m != 0u) atomicMax(amax_bits, m);
    if (kWrite && count != 0u) atomicAdd(overflow_count, static_cast<unsigned long long>(count));
  }
}

template <typename O>
__global__ void __launch_bounds__(kThreads)
    epilogue_kernel(const float* acc, int64_t total, int64_t n, const float* __restrict__ scale_inv_a,
                    const float* __restrict__ scale_inv_b, const float* __restrict__ bias, O* out) {
  // acc and out may be one buffer (an f32 output): no __restrict__ on them; each element is read, then written.
  const float s = (scale_inv_a != nullptr ? *scale_inv_a : 1.0f) * (scale_inv_b != nullptr ? *scale_inv_b : 1.0f);
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const float v = bias != nullptr ? fp8::epilogue(acc[i], s, bias[i % n]) : fp8::epilogue(acc[i], s);
    out[i] = narrow<O>(v);
  }
}

int64_t grid_for(int64_t work, int device) {
  const int64_t limit = int64_t{multiprocessor_count(device)} * kBlocksPerSm;
  return std::clamp<int64_t>(ceil_div(work, kThreads), 1, limit);
}

template <typename In, typename Format, bool kWrite>
void launch(const In* x, int64_t n, const float* scale, Fp8Overflow overflow, uint8_t* out, float* amax,
            int64_t* overflow_count, int device, cudaStream_t stream) {
  MT_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if constexpr (kWrite) MT_CUDA_CHECK(cudaMemsetAsync(overflow_count, 0, sizeof(int64_t), stream));
  if (n == 0) return;
  MT_ASSERT(!kWrite || reinterpret_cast<uintptr_t>(out) % 4 == 0, "quantize_fp8: the output is not 4-byte aligned");
  // The tail's threads are the first n % 4 of the grid: the grid always has at least 3 threads more than that.
  const int64_t blocks = grid_for(n / 4, device);
  using S = storage_t<In>;
  quantize_kernel<S, Format, kWrite><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      reinterpret_cast<const S*>(x), n, scale, overflow, reinterpret_cast<uint32_t*>(out),
      reinterpret_cast<uint32_t*>(amax), reinterpret_cast<unsigned long long*>(overflow_count));
  MT_CUDA_LAUNCH_CHECK(kWrite ? "quantize_fp8 kernel" : "amax kernel");
}

}  // namespace

template <typename In>
void launch_quantize_fp8(const In* x, int64_t n, const float* scale, DType fp8, Fp8Overflow overflow, uint8_t* out,
                         float* amax, int64_t* overflow_count, int device, cudaStream_t stream) {
  MT_ASSERT(is_float8(fp8), "launch_quantize_fp8: ", dtype_name(fp8), " is not an FP8 dtype");
  if (fp8 == DType::kF8E4M3) {
    launch<In, Fp8E4M3Format, true>(x, n, scale, overflow, out, amax, overflow_count, device, stream);
  } else {
    launch<In, Fp8E5M2Format, true>(x, n, scale, overflow, out, amax, overflow_count, device, stream);
  }
}

template <typename In>
void launch_amax(const In* x, int64_t n, float* amax, int device, cudaStream_t stream) {
  launch<In, Fp8E4M3Format, false>(x, n, nullptr, Fp8Overflow::kSaturate, nullptr, amax, nullptr, device, stream);
}

template <typename Out>
void launch_scaled_mm_epilogue(const float* acc, int64_t m, int64_t n, const float* scale_inv_a,
                               const float* scale_inv_b, const float* bias, Out* out, int device, cudaStream_t stream) {
  const int64_t total = m * n;
  if (total == 0) return;
  using O = storage_t<Out>;
  epilogue_kernel<O><<<static_cast<unsigned>(grid_for(total, device)), kThreads, 0, stream>>>(
      acc, total, n, scale_inv_a, scale_inv_b, bias, reinterpret_cast<O*>(out));
  MT_CUDA_LAUNCH_CHECK("scaled_mm epilogue kernel");
}

template void launch_quantize_fp8<float>(const float*, int64_t, const float*, DType, Fp8Overflow, uint8_t*, float*,
                                         int64_t*, int, cudaStream_t);
template void launch_quantize_fp8<Half>(const Half*, int64_t, const float*, DType, Fp8Overflow, uint8_t*, float*,
                                        int64_t*, int, cudaStream_t);
template void launch_quantize_fp8<BFloat16>(const BFloat16*, int64_t, const float*, DType, Fp8Overflow, uint8_t*,
                                            float*, int64_t*, int, cudaStream_t);
template void launch_amax<float>(const float*, int64_t, float*, int, cudaStream_t);
template void launch_amax<Half>(const Half*, int64_t, float*, int, cudaStream_t);
template void launch_amax<BFloat16>(const BFloat16*, int64_t, float*, int, cudaStream_t);
template void launch_scaled_mm_epilogue<float>(const float*, int64_t, int64_t, const float*, const float*, const float*,
                                               float*, int, cudaStream_t);
template void launch_scaled_mm_epilogue<Half>(const float*, int64_t, int64_t, const float*, const float*, const float*,
                                              Half*, int, cudaStream_t);
template void launch_scaled_mm_epilogue<BFloat16>(const float*, int64_t, int64_t, const float*, const float*,
                                                  const float*, BFloat16*, int, cudaStream_t);

}  // namespace mantissa::gpu
