// The CUDA side of the optimizers' group updates: the parameters' device pointers in one list, the
// device made current, and the fused launchers of optim/cuda/fused_optim.cu on its current stream.
#include <vector>

#include "framework/cuda/stream.h"
#include "optim/cuda/fused_optim.h"
#include "optim/cuda/fused_optim_entries.h"
#include "optim/cuda/ladder.h"

namespace mantissa {
namespace {

// The f32 pointer lists of a group (pointers_of<float> refuses any other dtype) and its device.
template <typename Params>
auto float_pointers(std::span<const Params> params) {
  std::vector<decltype(pointers_of<float>(params.front()))> list;
  for (const Params& t : params) list.push_back(pointers_of<float>(t));
  return list;
}

}  // namespace

void cuda_sgd_step(std::span<const SgdParamTensors> params, const SGDOptions& options, cpu::ScalingPointers scaling) {
  if (params.empty()) return;
  const Device device = params.front().param.device();
  gpu::DeviceGuard guard(device);
  gpu::sgd_step(float_pointers(params), options, scaling, gpu::current_stream(device));
}

void cuda_adam_step(std::span<const AdamParamTensors> params, const AdamOptions& options, cpu::WeightDecay mode,
                    cpu::ScalingPointers scaling) {
  if (params.empty()) return;
  const Device device = params.front().param.device();
  gpu::DeviceGuard guard(device);
  gpu::adam_step(float_pointers(params), options, mode, scaling, gpu::current_stream(device));
}

void cuda_lion_step(std::span<const LionParamTensors> params, const LionOptions& options,
                    cpu::ScalingPointers scaling) {
  if (params.empty()) return;
  const Device device = params.front().param.device();
  gpu::DeviceGuard guard(device);
  gpu::lion_step(float_pointers(params), options, scaling, gpu::current_stream(device));
}

void cuda_ladder_step(Device device, std::span<const cpu::LadderParam> params, const PrecisionLadder& ladder,
                      const cpu::LadderOp& op, cpu::ScalingPointers scaling) {
  if (params.empty()) return;
  gpu::DeviceGuard guard(device);
  gpu::ladder_step(params, ladder, op, scaling, gpu::current_stream(device));
}

}  // namespace mantissa
