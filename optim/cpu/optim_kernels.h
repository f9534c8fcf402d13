// CPU kernels of the optimizer updates and the grad-scaling passes: plain functions over raw pointers,
// the shape a CUDA kernel has. The step count, inv_scale and found_inf are read through pointers inside the
// kernel (never by the caller), so a kernel can skip a step the scaler rejected without a host sync.
#pragma once

#include <cstdint>

#include "optim/options.h"

namespace mantissa::cpu {

// The GradScaler's values for a fused step; both null for a plain step. When found_inf is non-zero the
// kernel returns before touching anything; otherwise each grad is read as grad * inv_scale (rounded in T).
struct ScalingPointers {
  const float* inv_scale = nullptr;
  const float* found_inf = nullptr;
};

// A parameter's persistent 16-bit working copy (Optimizer::enable_working_copies), written by the update
// kernel in the same pass: each block of updated values is rounded into the copy while still in cache.
enum class CopyDType { kNone, kF16, kBF16 };
struct WorkingCopyOut {
  void* data = nullptr;  // n elements of `dtype`; null: no copy
  CopyDType dtype = CopyDType::kNone;
};

// One parameter of n elements. momentum_buffer is null when momentum == 0. *step counts this parameter's
// steps; 0 means the buffer has never been written (the first step sets buf = d, as PyTorch does).
template <typename T>
struct SgdPointers {
  T* param;
  const T* grad;
  T* momentum_buffer;
  int64_t* step;
  int64_t n;
  WorkingCopyOut copy = {};
};
template <typename T>
void sgd_step(const SgdPointers<T>& t, const SGDOptions& o, ScalingPointers s);

// Adam's L2 penalty (added to the grad) or AdamW's decoupled decay (p *= 1 - lr * weight_decay).
enum class WeightDecay { kL2, kDecoupled };

// max_exp_avg_sq is null unless amsgrad.
template <typename T>
struct AdamPointers {
  T* param;
  const T* grad;
  T* exp_avg;
  T* exp_avg_sq;
  T* max_exp_avg_sq;
  int64_t* step;
  int64_t n;
  WorkingCopyOut copy = {};
};
template <typename T>
void adam_step(const AdamPointers<T>& t, const AdamOptions& o, WeightDecay mode, ScalingPointers s);

// One parameter of Lion: its momentum exp_avg (PyTorch reference's name).
template <typename T>
struct LionPointers {
  T* param;
  const T* grad;
  T* exp_avg;
  int64_t* step;
  int64_t n;
  WorkingCopyOut copy = {};
};
template <typename T>
void lion_step(const LionPointers<T>& t, const LionOptions& o, ScalingPointers s);

// What a partial of clip_grad_norm_ holds for its block of norm_order::kBlock values: their sum of squares
// in f64, in optim/norm_order.h's order, or their max |g| (nan when any value is nan).
enum class NormPartial { kSumSquares, kMaxAbs };
// Writes the norm_order::blocks(n) partials of g's n values to partials[0], partials[1], ... The blocks are
// fixed, so the result does not depend on the thread count.
template <typename T>
void norm_partials(const T* g, int64_t n, NormPartial what, double* partials);
// The sum (norm_order's level 2) or the max (nan wins) of count partials: the total sum of squares or the
// inf norm.
double combine_partials(const double* partials, int64_t count, NormPartial what);
// g *= coef in T.
template <typename T>
void scale(T* g, int64_t n, double coef);
// g = clamp(g, -limit, limit); nan stays nan.
template <typename T>
void clamp_abs(T* g, int64_t n, double limit);

}  // namespace mantissa::cpu
