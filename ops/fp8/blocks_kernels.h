// The kernels of the block-scaled ops (ops/fp8/blocks.h) that live outside blocks.cc: the CPU block-scaled GEMM,
// which shares the scaled GEMM emulation of ops/fp8/fp8.cc, and the CUDA kernels (ops/fp8/blocks.cu and
// blocks_gemm.cu, which only CUDA builds compile: written, never run on a GPU). Arguments are checked by the
// entries.
#pragma once

#include "framework/tensor.h"
#include "ops/fp8/blocks.h"

namespace mantissa {

// out [M, N] (contiguous) = block_scaled_mm's result: sa [M, blocks], sb [blocks, N or ceil(N / block_k)] f32;
// alpha (0-d f32) and bias may be undefined; e2m1 as BlockScaledMmOptions says.
void cpu_block_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, int64_t block_k,
                         bool e2m1, const Tensor& alpha, const Tensor& bias, const Tensor& out);
void cuda_block_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, int64_t block_k,
                          bool e2m1, const Tensor& alpha, const Tensor& bias, const Tensor& out);

// q's tensors allocated by the entry ([R, C] data, the scale grids, the 0-d results); x contiguous [R, C] of
// its input dtype; block_cols resolved (never 0).
void cuda_quantize_blocks(const Tensor& x, const BlockQuantOptions& options, const BlockQuantized& q);
// out [R, C] f32 = hadamard16(x, signs), x contiguous f32/f16/bf16, signs [16] f32 on x's device.
void cuda_hadamard16(const Tensor& x, const Tensor& signs, const Tensor& out);

}  // namespace mantissa
