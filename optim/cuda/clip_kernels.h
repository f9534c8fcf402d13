// Launchers of clip_grad_norm_'s CUDA passes (optim/cuda/clip_kernels.cu), enqueued on `stream` with no
// host read: the norm partials of many grads in one multi-tensor pass, one small kernel that combines them
// into the total and the clipping coefficient, and a multi-tensor pass that scales the grads by that
// coefficient and returns at once where it is not below 1. The sums follow optim/norm_order.h, the order the
// CPU kernels follow, so the total and the scaled grads are written to equal the CPU's bit for bit
// (not yet run on a GPU). Included only by CUDA-only files (.cu).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>
#include <span>

#include "optim/cpu/optim_kernels.h"

namespace mantissa::gpu {

// The element type of the grads of one launch sequence (clip_grad_norm_ accepts f32 and f64 grads).
enum class ClipDType { kF32, kF64 };

// Writes the norm_order::blocks(sizes[i]) partials of grads[i] (sizes[i] values of `dtype` on the device)
// to partials_out[i][0], [1], ...: the same values cpu::norm_partials writes.
void norm_partials(std::span<void* const> grads, std::span<const int64_t> sizes, std::span<double* const> partials_out,
                   ClipDType dtype, cpu::NormPartial what, cudaStream_t stream);

// One block: combines `count` partials as cpu::combine_partials does, writes the norm (the square root of
// the sum of squares, or the max) to *total and norm_order::clip_coefficient(norm, max_norm) to *coef.
void combine_partials(const double* partials, int64_t count, cpu::NormPartial what, double max_norm, double* total,
                      double* coef, cudaStream_t stream);

// grads[i] *= *coef rounded to `dtype` (as cpu::scale), read on the device; nothing changes unless *coef < 1.
void scale_by_coefficient(std::span<void* const> grads, std::span<const int64_t> sizes, ClipDType dtype,
                          const double* coef, cudaStream_t stream);

}  // namespace mantissa::gpu
