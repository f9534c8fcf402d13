// Scaled dot-product attention, softmax(q k^T * scale + mask) v over the last two dims, layout
// [..., T, D] (e.g. B, H, T, D), as PyTorch's torch.nn.functional.scaled_dot_product_attention.
//
// One fused op (FlashAttention's tiling): the scores and weights are never stored, they are in f32
// (f64 for f64) whatever the inputs' dtype, and the output rounds once; the backward recomputes the
// weights from the saved log-sum-exp instead of keeping them. Dropout on the weights draws exactly the
// words dropout() would draw for them from the same generator, so the fused op and the composed one
// (scaled_dot_product_attention_math) drop the same weights. create_graph works (the backward's own
// formulas run as differentiable ops), so gradgradcheck passes, where PyTorch's fused CPU kernel has no
// double backward.
#pragma once

#include "framework/generator.h"
#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

enum class AttentionMask { kNone, kCausal };  // kCausal: query i sees keys j <= i (top-left aligned)

struct AttentionOptions {
  AttentionMask mask = AttentionMask::kNone;
  double scale = 0.0;              // 0 means 1/sqrt(D)
  double dropout_p = 0.0;          // dropout on the attention weights (pass 0 in eval, as PyTorch's callers do)
  Generator* generator = nullptr;  // for dropout; null means default_generator()
};

MT_OP(scaled_dot_product_attention, kLowerPrecision, kLowerPrecision);
// q [..., L, D], k [..., S, D], v [..., S, Dv] -> [..., L, Dv]; batch dims broadcast. Reads q, k and v
// in place when each one's last dim is contiguous (a head view of a [B, T, 3C] projection qualifies).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions options = {});

// The same attention composed of matmul, masked_fill, softmax, dropout and matmul (PyTorch's "math"
// backend): every intermediate is a tensor in the inputs' dtype. The reference the fused op is tested
// against; no autocast of its own.
Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         AttentionOptions options = {});

}  // namespace mantissa
