// One fused attention call as both devices' kernels receive it: the operands (rows addressed through
// AttentionRows, so the GPT's head views [B, H, T, D] of a [B, T, 3C] projection are read in place), the
// sizes, the scale, the dropout draw, and the forward's results.
#pragma once

#include "framework/tensor.h"
#include "ops/attention/attention_math.h"

namespace mantissa {

struct AttentionProblem {
  Tensor q, k, v;  // [batch..., L|S, D|Dv], last dim contiguous, batch dims expanded to one shape
  AttentionRows q_rows, k_rows, v_rows;
  AttentionShape shape;
  double scale = 1.0;
  AttentionDropout dropout;
  Tensor out;  // [batch..., L, Dv], contiguous, q's dtype
  Tensor lse;  // [N, L], f32 (f64 for f64 inputs): each row's log-sum-exp of its scaled scores
};

// Gradients of one call, each contiguous in its input's (expanded) shape.
struct AttentionGrads {
  Tensor dout;  // [batch..., L, Dv], contiguous
  Tensor dq, dk, dv;
};

}  // namespace mantissa
