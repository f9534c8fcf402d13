// The CUDA kernels of ops/loss/loss.cc's class-index losses: a fused log_softmax + nll (and nll alone) whose
// mean over the non-ignored targets is taken on the device, with no host synchronization; the count
// stays on the device for the backward. Declared in every build; defined in loss.cu, which only CUDA builds
// compile.
#pragma once

#include "framework/tensor.h"
#include "ops/loss/loss.h"
#include "ops/loss/loss_cpu.h"

namespace mantissa {

cpu::ClassLossForward cuda_cross_entropy(const cpu::ClassPlan& p, CrossEntropyOptions options);
Tensor cuda_cross_entropy_backward(const Tensor& grad, const cpu::ClassLossSaved& saved);
cpu::ClassLossForward cuda_nll_loss(const cpu::ClassPlan& p, CrossEntropyOptions options);
Tensor cuda_nll_loss_backward(const Tensor& grad, const cpu::ClassLossSaved& saved);

}  // namespace mantissa
