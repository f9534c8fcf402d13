// Scaled dot-product attention: softmax(q k^T * scale + mask) v over the last two dims, composed from
// matmul, masked_fill and softmax (so its backward is theirs). Layout [..., T, D] (e.g. B, H, T, D).
#pragma once

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

enum class AttentionMask { kNone, kCausal };  // kCausal: query i sees keys j <= i (top-left aligned)

struct AttentionOptions {
  AttentionMask mask = AttentionMask::kNone;
  double scale = 0.0;  // 0 means 1/sqrt(D)
};

MT_OP(scaled_dot_product_attention, kLowerPrecision, kLowerPrecision);
// q [..., L, D], k [..., S, D], v [..., S, Dv] -> [..., L, Dv]; batch dims broadcast.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions options = {});

}  // namespace mantissa
