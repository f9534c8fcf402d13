// Launchers of the FP8 kernels on CUDA, over raw device pointers: the fused quantize pass and amax
// (ops/fp8/fp8.cu), the scaled matmul's epilogue kernel, and cuBLASLt's FP8 GEMM (ops/fp8/fp8_gemm.cu).
// The per-element math is ops/fp8/fp8_math.h's, the CPU kernels' (ops/fp8/fp8_cpu.h). Only for CUDA-only files (.cu,
// host/*.cc).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/dtype.h"
#include "framework/float8.h"
#include "framework/half.h"
#include "ops/fp8/fp8_plan.h"

namespace mantissa::gpu {

// out[i] = cast(x[i] * *scale) to `fp8` for n contiguous elements (In: float, Half, BFloat16), *amax = max |x|
// (nan propagates), *overflow = the overflowing elements and *underflow the flushed ones (finite, not 0, a zero
// byte), all written on `stream` (the three are zeroed first; the scale is read on the device). out must be
// 4-byte aligned (a fresh tensor is).
template <typename In>
void launch_quantize_fp8(const In* x, int64_t n, const float* scale, DType fp8, Fp8Overflow overflow, uint8_t* out,
                         float* amax, int64_t* overflow_count, int64_t* underflow_count, int device,
                         cudaStream_t stream);

// *amax = max |x| over n contiguous elements.
template <typename In>
void launch_amax(const In* x, int64_t n, float* amax, int device, cudaStream_t stream);

// The folded cast's scalar steps (ops/fp8/fp8.h, Fp8CastOptions), one thread each on `stream`: *scale =
// fp8::dynamic_scale(*amax, fp8_max, pow2_margin) and *scale_inv = 1 / *scale; and the state's updates,
// *amax_into = fp8::fold_amax(*amax_into, *amax), *overflow_into += *count and *underflow_into += *zeros, each
// skipped where its pointer
// is null.
void launch_fp8_dynamic_scale(const float* amax, float fp8_max, float pow2_margin, float* scale, float* scale_inv,
                              cudaStream_t stream);
void launch_fp8_fold_stats(const float* amax, const int64_t* count, const int64_t* zeros, float* amax_into,
                           double* overflow_into, double* underflow_into, cudaStream_t stream);

// out[i, j] = fp8::epilogue(acc[i, j], s, bias[j]) rounded once to Out (float, Half, BFloat16), s = *scale_inv_a *
// *scale_inv_b read on the device (a null pointer counts as 1), no bias when bias is null; with `rowwise`,
// s = scale_inv_a[i] * scale_inv_b[j] (vectors [m] and [n]). acc and out are dense [m, n] and may be the same
// memory when Out is float.
template <typename Out>
void launch_scaled_mm_epilogue(const float* acc, int64_t m, int64_t n, const float* scale_inv_a,
                               const float* scale_inv_b, const float* bias, Out* out, int device, cudaStream_t stream,
                               bool rowwise = false);

// cuBLASLt's FP8 GEMM: d[m, n] (row-major, dtype key.d) = a[m, k] @ b[k, n] * *scale_inv_a * *scale_inv_b (+ bias
// [n] of key.bias_dtype when key.bias is kEpilogue), a given K-contiguous with row stride key.lda, b given as its
// K-contiguous transpose bt [n, k] with row stride key.ldb (ops/fp8/fp8_plan.h). Returns false, having done
// nothing, when cuBLASLt offers no algorithm for the case or declines it; throws on any other failure.
struct Fp8GemmArgs {
  Fp8GemmKey key;
  const void* a = nullptr;
  const void* bt = nullptr;
  const void* scale_inv_a = nullptr;  // f32 per tensor, vector or 128-block; bytes for VEC32 and VEC16
  const void* scale_inv_b = nullptr;
  const void* bias = nullptr;
  void* d = nullptr;
};
bool fp8_gemm(const Fp8GemmArgs& args, cudaStream_t stream);

// How this thread's scaled_mm calls went, for tests and benchmarks.
struct ScaledMmStats {
  int64_t fp8_gemms = 0;        // through cuBLASLt's FP8 GEMM
  int64_t separate_biases = 0;  // of those, the bias added by the epilogue kernel
  int64_t fallbacks = 0;        // decoded to f32
  int64_t plans_built = 0;      // cuBLASLt FP8 descriptors made (a heuristic query each)
};
ScaledMmStats scaled_mm_stats();
void count_scaled_mm(const ScaledMmStats& delta);

// The compute capability of `device` as 10 * major + minor (asked once, then cached).
int compute_capability(int device);

}  // namespace mantissa::gpu
