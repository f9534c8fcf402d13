// The CUDA typed entries of amp/unscale_grads.cc and the GradScaler on a GPU (amp/grad_scaler_cuda.cc):
// tensors in, launches of amp/cuda/amp_kernels.cu on the device's current stream out. Declared in every
// build (no CUDA headers); defined in amp_kernels.cc, CUDA builds only; the callers name them in
// DeviceKernels tables (framework/device_kernels.h).
#pragma once

#include <span>

#include "amp/loss_scale_rule.h"
#include "framework/tensor.h"

namespace mantissa {

// For each grad (contiguous; f32, f16 or bf16; on found_inf's GPU): found_inf = 1 when it holds an inf or
// nan, and with an inv_scale, g *= inv_scale in place; one multi-tensor pass per grad dtype. inv_scale and
// found_inf are f32 scalars on that GPU; a null inv_scale checks only.
void cuda_unscale_grads(std::span<const Tensor> grads, const Tensor* inv_scale, const Tensor& found_inf);

// One GradScaler update() on the scaler's GPU: found_inf is the OR of the flags (f32 scalars), then
// amp::loss_scale::apply_rule on scale, inv_scale (f32 scalars) and counters (i64 [loss_scale::kNumCounters]).
void cuda_update_loss_scale(const Tensor& scale, const Tensor& inv_scale, const Tensor& counters,
                            std::span<const Tensor> found_inf, const amp::loss_scale::Rule& rule);

}  // namespace mantissa
