// Matrix products with PyTorch's semantics: mm, bmm, matmul (1-D promotion, broadcast batch dims),
// linear, addmm, baddbmm, each with its backward. Operands must share one floating dtype; f16/bf16
// operands accumulate in fp32 and round once at the output (the bias of addmm/linear included).
#pragma once

#include "framework/tensor.h"
#include "ops/matmul/activation.h"
#include "ops/op.h"

namespace mantissa {

MT_OP(mm, kLowerPrecision, kLowerPrecision);
// a [m, k] @ b [k, n] -> [m, n].
Tensor mm(const Tensor& a, const Tensor& b);
MT_OP(bmm, kLowerPrecision, kLowerPrecision);
// a [B, m, k] @ b [B, k, n] -> [B, m, n] (equal batch sizes, as torch.bmm).
Tensor bmm(const Tensor& a, const Tensor& b);
MT_OP(matmul, kLowerPrecision, kLowerPrecision);
// torch.matmul: 1-D x 1-D is a dot product (0-d); a 1-D operand is promoted to a matrix and the added
// dim removed from the result; batch dims (all but the last two) broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
MT_OP(linear, kLowerPrecision, kLowerPrecision);
// x [..., in] @ weight [out, in]^T + bias [out] -> [..., out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// act(x [..., in] @ weight [out, in]^T + bias [out]) as one op (ops/matmul/linear_act.cc): on the CPU the
// activation runs on each tile of the GEMM's accumulator while it is in cache, and the backward computes
// g * act'(.) and the bias gradient in one pass. The values are those of linear then the activation's op
// (f16/bf16: the pre-activation rounded as linear's output, then the activation's output), up to the GEMM's
// sum order. CUDA tensors run linear (cuBLASLt's bias epilogue) then the activation's op. Autocast: linear's
// descriptor (a fused op casts as the op it fuses; it has no entry in PyTorch's lists). kNone is linear itself.
Tensor linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act);
// The activation alone, as its own op (relu, gelu): what linear_act fuses, for the paths that compose it.
Tensor activate(const Tensor& x, Activation act);
MT_OP(addmm, kLowerPrecision, kLowerPrecision);
// beta * bias + alpha * (a [m, k] @ b [k, n]); bias broadcasts to [m, n]. With beta == 0 the bias is
// not read (nan or inf in it do not propagate), as in PyTorch.
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
MT_OP(baddbmm, kLowerPrecision, kLowerPrecision);
// beta * bias + alpha * (a [B, m, k] @ b [B, k, n]); bias broadcasts to [B, m, n].
Tensor baddbmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0);
MT_OP(dot, kNone, kPromote);
// a [n] . b [n] -> 0-d, accumulated in fp32 (f64 for f64). a and b must share a dtype, as torch.dot;
// under CUDA autocast both go to the wider one (the promote category; PyTorch's CPU lists leave it out).
Tensor dot(const Tensor& a, const Tensor& b);

}  // namespace mantissa
