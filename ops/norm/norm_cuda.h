// The CUDA kernels of ops/norm/norm.cc, with the same arguments as its CPU kernels: contiguous tensors on one
// device, per-feature tensors in the compute dtype (f32, f64 for f64), and undefined tensors for the
// optional weight and bias and for the gradients nobody needs. Declared in every build; defined in norm.cu, which only
// CUDA builds compile.
#pragma once

#include "framework/tensor.h"
#include "ops/norm/norm.h"
#include "ops/norm/norm_cpu.h"

namespace mantissa {

void cuda_layer_norm(const cpu::LayerNormGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                     const Tensor& out, const Tensor& mean, const Tensor& rstd);
// Input gradient, and deterministic sliced weight/bias gradients.
void cuda_layer_norm_backward(const cpu::LayerNormGeometry& g, const Tensor& dy, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& w, const Tensor& dx, const Tensor& dw,
                              const Tensor& db);
// Batch mean/invstd and the in-place running update (kTrain), or mean/invstd from the running statistics
// (kEval).
void cuda_batch_norm_stats(const Tensor& xc, const cpu::BatchNormGeometry& g, BatchNormMode mode,
                           const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                           const Tensor& mean, const Tensor& invstd);
void cuda_batch_norm_apply(const cpu::BatchNormGeometry& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                           const Tensor& w, const Tensor& b, const Tensor& out);
void cuda_batch_norm_backward(const cpu::BatchNormGeometry& g, cpu::BatchStats stats, const Tensor& dy, const Tensor& x,
                              const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& dx,
                              const Tensor& dw, const Tensor& db);

}  // namespace mantissa
