// What one param group's update hands to its device's kernel (framework/device_kernels.h): per optimizer,
// the list of its parameters' tensors (the class looked the state up by name), one kernel type that the
// CPU entry (in the optimizer's .cc) and the CUDA entry (optim/cuda/fused_optim_entries.h) both have, and the
// raw-pointer view the kernels read.
#pragma once

#include <span>

#include "framework/tensor.h"
#include "optim/cpu/ladder_kernels.h"
#include "optim/cpu/optim_kernels.h"
#include "optim/options.h"

namespace mantissa {

// One parameter of a group: its tensors, all on one device, contiguous and of the parameter's dtype;
// `step` is its i64 scalar step count; `copy` its working copy (null when working copies are off).
struct SgdParamTensors {
  Tensor param, grad;
  Tensor momentum_buffer;  // undefined without momentum
  Tensor step;
  cpu::WorkingCopyOut copy;
};
struct AdamParamTensors {
  Tensor param, grad, exp_avg, exp_avg_sq;
  Tensor max_exp_avg_sq;  // undefined unless amsgrad
  Tensor step;
  cpu::WorkingCopyOut copy;
};
struct LionParamTensors {
  Tensor param, grad, exp_avg, step;
  cpu::WorkingCopyOut copy;
};

// One call updates every parameter of the list (a CUDA entry: in one fused multi-tensor launch sequence
// on the device's current stream). `scaling`: both pointers null for a plain step.
using SgdStepKernel = void(std::span<const SgdParamTensors> params, const SGDOptions& options,
                           cpu::ScalingPointers scaling);
using AdamStepKernel = void(std::span<const AdamParamTensors> params, const AdamOptions& options, cpu::WeightDecay mode,
                            cpu::ScalingPointers scaling);
using LionStepKernel = void(std::span<const LionParamTensors> params, const LionOptions& options,
                            cpu::ScalingPointers scaling);
// The precision ladder's step of a group (optim/cpu/ladder_kernels.h): every parameter of the list through `op`.
// `device` is the parameters' (the list holds raw pointers).
using LadderStepKernel = void(Device device, std::span<const cpu::LadderParam> params, const PrecisionLadder& ladder,
                              const cpu::LadderOp& op, cpu::ScalingPointers scaling);

// The kernels' view of one parameter, in its dtype T (data<T>() checks that it is T).
template <typename T>
cpu::SgdPointers<T> pointers_of(const SgdParamTensors& t) {
  return {.param = t.param.data<T>(),
          .grad = t.grad.data<T>(),
          .momentum_buffer = t.momentum_buffer.defined() ? t.momentum_buffer.data<T>() : nullptr,
          .step = t.step.data<int64_t>(),
          .n = t.param.numel(),
          .copy = t.copy};
}
template <typename T>
cpu::AdamPointers<T> pointers_of(const AdamParamTensors& t) {
  return {.param = t.param.data<T>(),
          .grad = t.grad.data<T>(),
          .exp_avg = t.exp_avg.data<T>(),
          .exp_avg_sq = t.exp_avg_sq.data<T>(),
          .max_exp_avg_sq = t.max_exp_avg_sq.defined() ? t.max_exp_avg_sq.data<T>() : nullptr,
          .step = t.step.data<int64_t>(),
          .n = t.param.numel(),
          .copy = t.copy};
}
template <typename T>
cpu::LionPointers<T> pointers_of(const LionParamTensors& t) {
  return {.param = t.param.data<T>(),
          .grad = t.grad.data<T>(),
          .exp_avg = t.exp_avg.data<T>(),
          .step = t.step.data<int64_t>(),
          .n = t.param.numel(),
          .copy = t.copy};
}

// The CPU entries' loop: f(pointers_of<T>(t)) for each parameter, T its dtype (f32 or f64, the only
// dtypes an optimizer holds), so each parameter is one call of its cpu:: kernel.
template <typename Params, typename F>
void for_each_param_pointers(std::span<const Params> params, F&& f) {
  for (const Params& t : params) {
    if (t.param.dtype() == DType::kF64) {
      f(pointers_of<double>(t));
    } else {
      f(pointers_of<float>(t));
    }
  }
}

}  // namespace mantissa
