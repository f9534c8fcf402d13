// Launchers of the fused multi-tensor optimizer steps (optim/cuda/fused_optim.cu): SGD, Adam/AdamW and Lion
// over all the parameters of a group in a few launches, each reading found_inf and inv_scale on the device
// (nothing changes when found_inf != 0), advancing the per-parameter step counts on the device, and
// optionally writing the f16/bf16 working copy in the same pass. The element math is optim/update_math.h,
// the functions the CPU kernels call, so f32 results are written to equal cpu::sgd_step / adam_step /
// lion_step bit for bit (not yet run on a GPU). Included only by CUDA-only files (.cu).
#pragma once

#include <cuda_runtime_api.h>
#include <span>
#include <vector>

#include "optim/cpu/optim_kernels.h"

namespace mantissa::gpu {

// One launch sequence per group: tensors[i] as on the CPU (device pointers; every step pointer an i64
// scalar on the device; working copies all of one dtype or absent). scaling: both null for a plain step.
void sgd_step(std::span<const cpu::SgdPointers<float>> tensors, const SGDOptions& options, cpu::ScalingPointers scaling,
              cudaStream_t stream);
void adam_step(std::span<const cpu::AdamPointers<float>> tensors, const AdamOptions& options, cpu::WeightDecay mode,
               cpu::ScalingPointers scaling, cudaStream_t stream);
void lion_step(std::span<const cpu::LionPointers<float>> tensors, const LionOptions& options,
               cpu::ScalingPointers scaling, cudaStream_t stream);

// Adds 1 to each i64 step count on the device, unless found_inf (when not null) is non-zero: the first launch of
// every fused step, so that the update kernels read the count after this step.
void bump_steps(const std::vector<int64_t*>& steps, const float* found_inf, cudaStream_t stream);

}  // namespace mantissa::gpu
