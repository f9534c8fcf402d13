// Launchers of the grad-scaling kernels (amp/cuda/amp_kernels.cu): the unscale-and-check pass over all the
// grads of an optimizer in one multi-tensor sweep, and the loss-scale update on the device. Pointers are
// device pointers; inv_scale, found_inf and the scaler's state are read and written by the kernels only, so
// none of this is written to need a host synchronization (and all of it to be capturable in a CUDA graph).
// A CUDA header: included only by files CMake compiles with CUDA alone (amp_kernels.cu, cuda/host/).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>
#include <span>

#include "amp/loss_scale_rule.h"
#include "framework/dtype.h"

namespace mantissa::gpu {

enum class GradPass { kUnscale, kCheckOnly };

// PyTorch's _amp_foreach_non_finite_check_and_unscale_ over grads[i] (sizes[i] elements each, all of
// `dtype`: f32, f16 or bf16): *found_inf = 1 when any value is inf or nan (checked before scaling; never
// reset here), and with kUnscale g = g * *inv_scale in place (in f32, rounded once to a 16-bit grad).
void unscale_and_check(DType dtype, std::span<void* const> grads, std::span<const int64_t> sizes,
                       const float* inv_scale, float* found_inf, GradPass pass, cudaStream_t stream);

// At most this many found_inf flags (one per optimizer) feed one update.
inline constexpr int kMaxFoundInf = 32;

// One GradScaler update() on the device, a single thread: found_inf is the OR of the flags, then
// amp::loss_scale::apply_rule on *scale, *inv_scale and counters[loss_scale::kNumCounters].
void update_loss_scale(float* scale, float* inv_scale, int64_t* counters, std::span<const float* const> found_inf,
                       const amp::loss_scale::Rule& rule, cudaStream_t stream);

}  // namespace mantissa::gpu
