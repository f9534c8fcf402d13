// recompute: activation checkpointing, PyTorch's torch.utils.checkpoint (its reentrant form). The forward
// of a segment runs without recording a graph, so none of its intermediate activations are kept; the
// backward runs the segment again, with the same autocast state and random state as the first time, and
// backpropagates through that second graph. Memory falls from every activation of the segment to its
// inputs; the cost is one more forward of the segment per backward.
//
//   for (auto& block : blocks) {
//     x = recompute([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block->forward(in[0])}; },
//                   {x})[0];
//   }
//
// The segment must be a function of its inputs, the module parameters it reads and the random generators it
// draws from (give those that are not default_generator() in `generators`): the recomputation draws the
// same dropout masks from the same state, and leaves each generator where the backward found it. Autocast
// on or off, its dtype, cache mode and policy device are those of the forward, whatever is in force during the backward
// (a training loop's backward usually runs after its AutocastGuard is gone). Gradients reach the
// parameters the segment reads by their usual AccumulateGrad (DDP's hooks fire as for any backward) and the
// inputs through the graph this function records. Outside grad mode (evaluation, NoGradGuard) it is just
// fn(inputs).
#pragma once

#include <functional>
#include <vector>

#include "framework/generator.h"
#include "framework/tensor.h"

namespace mantissa {

using RecomputeFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

struct RecomputeOptions {
  // Generators, besides default_generator(), that the segment draws from.
  std::vector<Generator*> generators;
};

// Runs fn(inputs) keeping no activations for backward; returns its outputs, which record one node whose
// backward recomputes fn. An output must not be one of the inputs (return a copy).
std::vector<Tensor> recompute(const RecomputeFn& fn, const std::vector<Tensor>& inputs, RecomputeOptions options = {});

}  // namespace mantissa
