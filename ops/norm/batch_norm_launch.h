// CUDA batch_norm launchers over raw device pointers, NCHW seen as [n, channels, spatial] as in
// cpu::BatchNormGeometry. T is the input's type (f32, f64, f16, bf16); per-channel parameters,
// statistics and running statistics are P = param_t<T> (f64 for f64, else f32), already widened.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "ops/norm/layer_norm_launch.h"
#include "ops/norm/norm_cpu.h"

namespace mantissa::gpu {

// Batch statistics (a block per channel, two passes): mean[c] and invstd[c] = 1 / sqrt(biased var + eps);
// when running_mean/running_var are given (both or neither) they are updated in place with momentum and
// the unbiased variance, in f64 as ops/norm/norm.cc does on the CPU. Needs g.count() > 1.
template <typename T>
void launch_batch_norm_stats(const cpu::BatchNormGeometry& g, double eps, double momentum, const T* x,
                             param_t<T>* running_mean, param_t<T>* running_var, param_t<T>* mean, param_t<T>* invstd,
                             cudaStream_t stream);
// Eval mode: mean = running_mean, invstd = 1 / sqrt(running_var + eps).
template <typename T>
void launch_batch_norm_eval_stats(int64_t channels, double eps, const param_t<T>* running_mean,
                                  const param_t<T>* running_var, param_t<T>* mean, param_t<T>* invstd,
                                  cudaStream_t stream);
// y = (x - mean[c]) * invstd[c] * w[c] + b[c]; w, b may be null.
template <typename T>
void launch_batch_norm_apply(const cpu::BatchNormGeometry& g, const T* x, const param_t<T>* mean,
                             const param_t<T>* invstd, const param_t<T>* w, const param_t<T>* b, T* y,
                             cudaStream_t stream);
// dw[c] = sum dy*xhat, db[c] = sum dy, dx as cpu::batch_norm_backward (dx, dw, db may each be null);
// a block per channel.
template <typename T>
void launch_batch_norm_backward(const cpu::BatchNormGeometry& g, cpu::BatchStats stats, const T* dy, const T* x,
                                const param_t<T>* mean, const param_t<T>* invstd, const param_t<T>* w, T* dx,
                                param_t<T>* dw, param_t<T>* db, cudaStream_t stream);

}  // namespace mantissa::gpu
