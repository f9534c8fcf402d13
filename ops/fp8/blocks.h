// Block-scaled low precision: quantization with one scale per tile of a matrix (rowwise, 1x128 and 128x128
// blocks, MXFP8/MXFP4's 32-element E8M0 blocks, NVFP4's 16-element E4M3 blocks under a per-tensor f32 scale),
// the 16x16 random Hadamard transform the NVFP4 recipe applies before a weight-gradient GEMM, and the GEMM
// that applies the scales per block of K. amp/fp8_linear.h builds the recipes from these; the per-element math
// is ops/fp8/block_math.h's, shared by the CPU kernels (blocks.cc) and the CUDA kernels (blocks.cu; block_scaled_mm
// there takes cuBLASLt's block-scaled FP8 GEMM on Hopper for 128-wide blocks, cuBLASLt's MXFP8 and NVFP4 modes
// on Blackwell (written, never run), and an f32 path block by block otherwise). The CUDA casts, Hadamard and GEMM
// ran equal to the CPU on the H200 of 2026-11-28 (bench/gpu/2026-11-28-run2).
//
// Layout. x is read as a 2-D [R, C] matrix (row-major after .contiguous()), cut into tiles of block_rows x
// block_cols from the top left; the last tile of a row or column of tiles may be shorter (the ragged edge: its
// scale comes from the values it has, as if zero-padded, which is what padding on a GPU would compute). The
// scales are [ceil(R / block_rows), ceil(C / block_cols)]. A GEMM's K must run along the tiles' columns for a
// 1 x b tile; to scale along the other dimension (the weight gradient's K is the batch), quantize the transpose.
#pragma once

#include <cstdint>

#include "framework/float8.h"
#include "framework/tensor.h"
#include "ops/fp8/block_math.h"
#include "ops/op.h"

namespace mantissa {

using fp8::BlockElement;
using fp8::BlockScaleRule;

struct BlockQuantOptions {
  BlockElement element = BlockElement::kE4M3;
  BlockScaleRule rule = BlockScaleRule::kF32;
  int64_t block_rows = 1;
  int64_t block_cols = 128;                       // 0: the whole row (rowwise scaling)
  int64_t margin = 0;                             // kF32 and kF32Pow2: 2^margin of headroom, 0 to 64
  Fp8Overflow overflow = Fp8Overflow::kSaturate;  // E4M3/E5M2 with kF32 rules; MX and NVFP4 always saturate
  // NVFP4: also scale by a per-tensor f32 (P = amax(x) / (448 * 6)); false: block scales alone.
  bool tensor_scale = true;
  // NVFP4 with tensor_scale: a given P (0-d f32 on x's device: a calibrated one) instead of amax(x) / 2688.
  Tensor tensor_scale_inv;
  // E2M1 only: round each element stochastically with Philox4x32-10 bits from (seed, offset): see
  // ops/fp8/block_math.h's rounding_bits. The caller gives every cast its own offset.
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The result, on x's device.
struct BlockQuantized {
  Tensor data;              // [R, C] kF8E4M3 or kF8E5M2 (E2M1 elements as the E4M3 bytes of their values)
  Tensor scale_inv;         // [ceil(R / br), ceil(C / bc)] f32: each tile's dequantization factor (NVFP4: the E4M3
                            // block scale's value; the per-tensor factor is tensor_scale_inv)
  Tensor scale_bits;        // the same shape, i32: the stored scale (E8M0 exponent, E4M3 byte); undefined for kF32*
  Tensor tensor_scale_inv;  // 0-d f32: NVFP4's per-tensor decode scale P; undefined otherwise
  Tensor amax;              // 0-d f32: max |x| (nan if x holds one)
  Tensor overflow;          // 0-d i64: elements saturated (beyond the format's range after scaling)
  Tensor underflow;         // 0-d i64: finite non-zero elements that became 0
};

// Quantizes x ([R, C]; f32, f16 or bf16, any strides) block by block. Errors name the option: a block size below
// 1, a rule the element cannot take (kE8M0 and kNvfp4 need MX/NVFP4 elements: kNvfp4 E2M1, kE8M0 any; kF32*
// E4M3 or E5M2), stochastic rounding for an element other than E2M1. Not differentiable.
MT_OP(quantize_blocks, kNone, kNone);
BlockQuantized quantize_blocks(const Tensor& x, const BlockQuantOptions& options);

// The f32 values a quantization stands for: element x its tile's scale_inv (x tensor_scale_inv for NVFP4).
Tensor dequantize_blocks(const BlockQuantized& q, int64_t block_rows, int64_t block_cols);

// x [R, C] (f32, f16 or bf16) with every row's consecutive 16-element blocks multiplied by H = diag(signs) *
// H16 / 4 (H16 the Sylvester Hadamard matrix of order 16; signs 16 values of +-1, f32): an orthogonal map, so
// (A H)(B H)^T = A B^T for two operands transformed along their shared K. Computed in f32, returned in f32. A
// last block shorter than 16 (C % 16) is left as it is (the identity on it is orthogonal too). The NVFP4
// training recipe applies it to the weight gradient's operands along the batch (the GEMM's K).
MT_OP(hadamard16, kNone, kNone);
Tensor hadamard16(const Tensor& x, const Tensor& signs);
// 16 random signs (+-1 f32, on the CPU) from Philox under `seed`: what the recipes pass to hadamard16.
Tensor hadamard16_signs(uint64_t seed);

struct BlockScaledMmOptions {
  int64_t block_k = 128;  // the width of a scale's block along K (the last block may be shorter)
  DType out_dtype = DType::kF32;
  Tensor bias;   // [N], f32 or out_dtype, or undefined
  Tensor alpha;  // 0-d f32 applied to every output before the bias (NVFP4's P_a * P_b), or undefined
  // a and b hold E2M1 values (quantize_blocks with kE2M1, stored as E4M3 bytes): a GPU with FP4 tensor cores
  // may then multiply them packed (Blackwell's NVFP4 GEMM). The result does not depend on it on the CPU.
  bool e2m1 = false;
};

// out[M, N] = sum over the blocks b of K (block_k wide) of (a[:, b] @ b[b, :]) * scale_a[i, b] * scale_b[b, j],
// times alpha, plus bias, rounded once to out_dtype. a [M, K], b [K, N] FP8 (any strides; not both E5M2);
// scale_a [M, ceil(K / block_k)] f32; scale_b [ceil(K / block_k), N] (a scale per column) or
// [ceil(K / block_k), ceil(N / block_k)] (square blocks: 128x128 weights, NVFP4's 16x16). On the CPU, each block's
// products are summed on its own (in f32, or by the tensor-core model for 128-wide blocks: ops/fp8/accumulator.h),
// times its two scales in f32, and the blocks summed in f32 in K's order: what the H200's cuBLASLt computed for
// 1x128 and 128x128 scales (bench/gpu/2026-11-28, bit for bit). Scales that fold into the FP8 values exactly (E8M0
// powers of two, NVFP4's E4M3 block scales: at most 4 significant bits) are folded into the operands instead and
// all K exact products summed in f32 by one GEMM: the same sum in another order (no GPU's order for MX or NVFP4 has
// been recorded), one GEMM instead of K / 16. The tensor-core model is refused for other widths (Hopper has no 32-
// or 16-wide block scaling to model). Not differentiable.
MT_OP(block_scaled_mm, kNone, kNone);
Tensor block_scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                       const BlockScaledMmOptions& options);

}  // namespace mantissa
