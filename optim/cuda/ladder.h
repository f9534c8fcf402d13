// The precision ladder's CUDA step (optim/cuda/ladder.cu): the CPU's cpu::ladder_step (optim/cpu/ladder_kernels.h)
// for every parameter of a group in a few multi-tensor launches. One CUDA block per 2048-element block of a
// parameter, the 8-bit state's quantization block: the block loads weights, grad and state into f32 (widening bf16,
// dequantizing codes with the block's absmax), runs the optimizer's element formula of optim/update_math.h (the one
// the CPU step runs), rounds the weights to bf16 by the ladder's rule (optim/low_precision.h's functions, the CPU's
// too), and stores the state back (bf16, or re-quantized after a block-wide max). Written to equal the CPU bit for
// bit; it has not run on a GPU yet. Included only by CUDA-only files (.cu).
#pragma once

#include <cuda_runtime_api.h>
#include <span>

#include "optim/cpu/ladder_kernels.h"

namespace mantissa::gpu {

// params: device pointers, every step an i64 scalar on the device. scaling: both null for a plain step.
void ladder_step(std::span<const cpu::LadderParam> params, const PrecisionLadder& ladder, const cpu::LadderOp& op,
                 cpu::ScalingPointers scaling, cudaStream_t stream);

}  // namespace mantissa::gpu
