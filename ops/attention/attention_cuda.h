// The CUDA kernels of the fused attention (ops/attention/attention.cu: a warp per query row forward, a
// warp per query row for dQ and per key row for dK and dV backward; written and compiled, never run on a
// GPU). Declared in every build; defined in attention.cu, which only CUDA builds compile.
#pragma once

#include "ops/attention/attention_problem.h"

namespace mantissa {

// Fills p.out and p.lse.
void cuda_attention_forward(const AttentionProblem& p);
// Fills g.dq, g.dk, g.dv from g.dout and the forward's p.out, p.lse.
void cuda_attention_backward(const AttentionProblem& p, const AttentionGrads& g);

}  // namespace mantissa
