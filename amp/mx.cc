// quantize_mx (ops/fp8/blocks.h's quantize_blocks in MX form) and dequantize_mx (amp/mx.h).
#include "amp/mx.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "framework/error.h"
#include "ops/fp8/blocks.h"

namespace mantissa::amp {

MxTensor quantize_mx(const Tensor& x, DType element, int64_t block_size, MxScaleRounding rounding) {
  MT_CHECK(element == DType::kF8E4M3 || element == DType::kF8E5M2, "quantize_mx: element must be f8e4m3 or f8e5m2 ",
           "(MXFP8), got ", dtype_name(element));
  MT_CHECK(x.defined() && x.device().is_cpu() && (x.dtype() == DType::kF32 || x.dtype() == DType::kBF16),
           "quantize_mx: x must be a CPU f32 or bf16 tensor, got ",
           x.defined() ? std::string(dtype_name(x.dtype())) + " on " + x.device().str() : std::string("undefined"));
  MT_CHECK(block_size > 0, "quantize_mx: block_size must be positive, got ", block_size);
  MT_CHECK(x.dim() >= 1 && x.size(-1) % block_size == 0, "quantize_mx: the last dimension of ", shape_str(x.shape()),
           " is not a multiple of block_size ", block_size,
           ". HINT: MX blocks run along the last dimension (the GEMM's K) and have no ragged tail; pad K");
  const BlockQuantized q =
      quantize_blocks(x.reshape({-1, x.size(-1)}),
                      {.element = element == DType::kF8E4M3 ? BlockElement::kE4M3 : BlockElement::kE5M2,
                       .rule = rounding == MxScaleRounding::kRceil ? BlockScaleRule::kE8M0Rceil : BlockScaleRule::kE8M0,
                       .block_rows = 1,
                       .block_cols = block_size});
  Shape scale_shape = x.shape();
  scale_shape.back() /= block_size;
  return {.data = q.data.view(x.shape()), .scales = q.scale_bits.view(scale_shape), .block_size = block_size};
}

Tensor dequantize_mx(const MxTensor& q) {
  MT_CHECK(q.data.defined() && q.scales.defined() && is_float8(q.data.dtype()) && q.scales.dtype() == DType::kI32,
           "dequantize_mx: expected f8 data and i32 scales (quantize_mx's)");
  MT_CHECK(q.block_size > 0 && q.data.numel() == q.scales.numel() * q.block_size, "dequantize_mx: ", q.data.numel(),
           " elements do not make ", q.scales.numel(), " blocks of ", q.block_size);
  const Tensor data = q.data.contiguous(), scales = q.scales.contiguous();
  Tensor out = empty(q.data.shape(), {.dtype = DType::kF32});
  const auto* in = static_cast<const uint8_t*>(data.data_ptr());
  const int32_t* s = scales.data<int32_t>();
  float* o = out.data<float>();
  const bool e4m3 = q.data.dtype() == DType::kF8E4M3;
  for (int64_t b = 0; b < scales.numel(); ++b) {
    MT_CHECK(s[b] >= 0 && s[b] <= 255, "dequantize_mx: block ", b, "'s scale ", s[b], " is not an E8M0 exponent");
    const float scale = mx_dequant_scale(static_cast<uint8_t>(s[b]));
    for (int64_t i = b * q.block_size; i < (b + 1) * q.block_size; ++i) {
      const uint32_t bits = e4m3 ? Fp8E4M3Format::to_f32_bits(in[i]) : Fp8E5M2Format::to_f32_bits(in[i]);
      o[i] = std::bit_cast<float>(bits) * scale;
    }
  }
  return out;
}

}  // namespace mantissa::amp
