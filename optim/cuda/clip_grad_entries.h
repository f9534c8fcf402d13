// The CUDA entry of clip_grad_norm_ (optim/clip_grad.cc): the grads' norm and their scaling, enqueued on
// the grads' device's current stream with no host read. Declared in every build; defined in
// clip_grad_entries.cu, CUDA builds only (named through MT_CUDA_KERNEL).
#pragma once

#include <vector>

#include "framework/tensor.h"
#include "optim/cpu/optim_kernels.h"

namespace mantissa {

// The kernel type both devices' entries have: grads contiguous f32/f64 on one device, at least one. Returns
// the total norm as an f64 scalar tensor on that device; the grads are scaled in place when it exceeds
// max_norm.
using ClipGradNormKernel = Tensor(const std::vector<Tensor>& grads, double max_norm, cpu::NormPartial what);

Tensor cuda_clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, cpu::NormPartial what);

}  // namespace mantissa
