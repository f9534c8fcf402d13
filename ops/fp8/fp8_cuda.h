// The CUDA kernels of ops/fp8/fp8.cc: the fused quantize pass and amax (ops/fp8/fp8.cu), and the scaled FP8
// matmul (cuBLASLt's FP8 GEMM, ops/fp8/fp8_gemm.cu, or the decode fallback that ops/fp8/fp8_plan.h chooses).
// Declared in every build; defined in fp8.cu and fp8_gemm.cu, which only CUDA builds
// compile. Arguments are checked by the entries.
#pragma once

#include "framework/float8.h"
#include "framework/tensor.h"
#include "ops/fp8/fp8.h"

namespace mantissa {

// data = cast(x * scale) (x contiguous f32/f16/bf16, data contiguous FP8 of x's shape), amax = max |x| (0-d
// f32), overflow = the count of overflowing elements (0-d i64); scale is read on the device.
void cuda_quantize_fp8(const Tensor& x, const Tensor& scale, Fp8Overflow overflow, const Tensor& data,
                       const Tensor& amax, const Tensor& count, const Tensor& underflow);
// quantize_fp8's folded form (ops/fp8/fp8.h, Fp8CastOptions): data as above; scale is options.scale (read) or,
// when that is undefined, a 0-d f32 written with the dynamic scale, scale_inv (0-d f32) then with 1 / scale;
// options.amax_into, options.overflow_into and options.underflow_into updated in place where defined.
void cuda_quantize_fp8_into(const Tensor& x, const Fp8CastOptions& options, const Tensor& data, const Tensor& scale,
                            const Tensor& scale_inv);
// out (0-d f32) = max |x| over the contiguous x.
void cuda_amax(const Tensor& x, const Tensor& out);
// out [M, N] (contiguous, f32/bf16/f16) = a [M, K] @ b [K, N] * scale_inv_a * scale_inv_b (+ bias [N], f32 or
// out's dtype, or undefined); a and b FP8 with any strides.
void cuda_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_inv_a, const Tensor& scale_inv_b,
                    const Tensor& bias, const Tensor& out);

}  // namespace mantissa
