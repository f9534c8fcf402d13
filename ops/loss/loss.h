// Losses: cross_entropy (a fused log_softmax + nll with its own backward), nll_loss and mse_loss
// (ops/loss/loss.cc); l1, smooth_l1 and the binary cross-entropies (ops/loss/elementwise_losses.cc). PyTorch's
// semantics for reduction and ignore_index. f32, f64, f16, bf16 (16-bit computes in fp32).
#pragma once

#include <cstdint>

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

enum class Reduction { kNone, kMean, kSum };

// reduction kMean divides by the number of targets that are not ignore_index (nan when all are).
struct CrossEntropyOptions {
  Reduction reduction = Reduction::kMean;
  int64_t ignore_index = -100;
};

MT_OP(cross_entropy, kFp32, kFp32);
// logits [N, C] or [N, C, d1, ...] (or [C] with a 0-d target); target i64 (or i32) class indices of
// shape [N] or [N, d1, ...]. kNone returns the per-position losses in the target's shape.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});
MT_OP(nll_loss, kFp32, kFp32);
// The same shapes, with log-probabilities instead of logits: loss = -log_probs[n, target[n]].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, CrossEntropyOptions options = {});
MT_OP(mse_loss, kFp32, kFp32);
// (input - target)^2, reduced; input and target have the same shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);

MT_OP(l1_loss, kFp32, kFp32);
// Elementwise losses (ops/loss/elementwise_losses.cc): input and target have the same shape; gradients flow to both.
// |input - target|.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta 0 is l1_loss.
struct SmoothL1Options {
  Reduction reduction = Reduction::kMean;
  double beta = 1.0;
};
MT_OP(smooth_l1_loss, kFp32, kFp32);
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1Options options = {});
MT_OP(binary_cross_entropy, kFp32, kRefused);
// -(y log(x) + (1 - y) log(1 - x)) for probabilities x in [0, 1], each log clamped at -100 as PyTorch.
// Refused under CUDA autocast (its log(1 - x) loses everything in 16 bits): use the with-logits form. CPU
// autocast computes it in fp32, as PyTorch's CPU lists say.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
MT_OP(binary_cross_entropy_with_logits, kFp32, kFp32);
// binary_cross_entropy(sigmoid(x), y) fused and stable: max(x, 0) - x y + log(1 + exp(-|x|)).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::kMean);

}  // namespace mantissa
