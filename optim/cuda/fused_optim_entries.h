// The CUDA entries of the optimizers' group updates (optim/group_step.h's kernel types): each takes a
// group's f32 parameters on one CUDA device and enqueues the fused multi-tensor step of
// optim/cuda/fused_optim.cu on that device's current stream. Declared in every build; defined in
// fused_optim_entries.cu, CUDA builds only (named through MT_CUDA_KERNEL).
#pragma once

#include <span>

#include "optim/group_step.h"

namespace mantissa {

void cuda_sgd_step(std::span<const SgdParamTensors> params, const SGDOptions& options, cpu::ScalingPointers scaling);
void cuda_adam_step(std::span<const AdamParamTensors> params, const AdamOptions& options, cpu::WeightDecay mode,
                    cpu::ScalingPointers scaling);
void cuda_lion_step(std::span<const LionParamTensors> params, const LionOptions& options, cpu::ScalingPointers scaling);
// The precision ladder's step (optim/cuda/ladder.cu); `params` hold device pointers, all on one device.
void cuda_ladder_step(Device device, std::span<const cpu::LadderParam> params, const PrecisionLadder& ladder,
                      const cpu::LadderOp& op, cpu::ScalingPointers scaling);

}  // namespace mantissa
