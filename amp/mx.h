// OCP Microscaling (MX v1.0) block scaling for FP8 elements (MXFP8 E4M3 and E5M2): every block of
// `block_size` consecutive values along the last dimension shares one E8M0 scale, a power of two stored as its
// biased exponent (0..254: 2^(e - 127); 255: nan), and each value is stored as an FP8 element of x / scale.
// The scale is the specification's rule (section 6.3) as torchao's reference to_mx computes it with its
// default scaling mode (FLOOR): e = floor(log2(amax of the block)) - emax of the element format (8 for E4M3,
// 15 for E5M2), read off amax's f32 exponent field, clamped to [-127, 128] and biased by 127; a block holding
// a nan gets 255. Elements are x / scale (an f32 division; a scale of 2^-127 divides by 2^-126, as torchao's
// clamp to the smallest normal does), clamped to the format's maximum and rounded to nearest even.
// dequantize_mx multiplies back in f32 (a scale of 255 gives nan). Both bit for bit against torchao 0.18
// (tests/golden/mx.h5, scripts/golden/mx.py).
//
// quantize_mx is ops/fp8/blocks.h's quantize_blocks with the E8M0 rule in 1 x block_size tiles, in the
// shape torchao's MXTensor has (any leading dims, blocks along the last). MxScaleRounding::kRceil takes the scale
// rounded up instead (2^ceil(log2(amax / max)): cuBLAS's rule on Blackwell, torchao's ScaleCalculationMode.RCEIL,
// ops/fp8/block_math.h's mx_scale_rceil), with which no element saturates.
#pragma once

#include <cstdint>

#include "framework/float8.h"
#include "framework/tensor.h"
#include "ops/fp8/block_math.h"

namespace mantissa::amp {

// The largest power of two an element format holds (emax): 8 for E4M3 (448 = 1.75 x 2^8), 15 for E5M2.
constexpr int mx_element_emax(DType element) { return element == DType::kF8E4M3 ? 8 : 15; }

// The E8M0 scale rule and its two readings (ops/fp8/block_math.h, shared with the block-scaled recipes).
using fp8::mx_dequant_scale;
using fp8::mx_division_scale;
using fp8::mx_scale_floor;

enum class MxScaleRounding : uint8_t { kFloor, kRceil };

struct MxTensor {
  Tensor data;    // the elements: kF8E4M3 or kF8E5M2, x's shape
  Tensor scales;  // the blocks' biased E8M0 exponents (0..255) as kI32: [..., last dim / block_size]
  int64_t block_size = 32;
};

// x: a CPU f32 or bf16 tensor whose last dimension is a multiple of block_size (no ragged tail: a block
// size that does not divide it is refused naming both); element: kF8E4M3 or kF8E5M2.
MxTensor quantize_mx(const Tensor& x, DType element, int64_t block_size = 32,
                     MxScaleRounding rounding = MxScaleRounding::kFloor);
// The f32 values q stands for: element x 2^(scale - 127).
Tensor dequantize_mx(const MxTensor& q);

}  // namespace mantissa::amp
