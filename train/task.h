// Task: how a model meets its batches (the loss of a training batch, the sums of an evaluation batch), and
// the two the programs use: a classifier's and a language model's. The Trainer's loop knows only Task.
#pragma once

#include <cstdint>
#include <functional>

#include "data/dataset.h"
#include "framework/device.h"
#include "framework/tensor.h"

namespace mantissa {

class GPT;

// The sums of one evaluation batch: loss summed over `count` items, and for classifiers how many of
// them were predicted right.
struct EvalSums {
  double loss_sum = 0.0;
  int64_t correct = 0;
  int64_t count = 0;
};

// How a model meets its batches.
struct Task {
  // The mean loss of one training batch (called with the model in training mode, under autocast).
  std::function<Tensor(const Example& batch)> loss;
  // The sums of one evaluation batch (called without grad, in eval mode, under autocast).
  std::function<EvalSums(const Example& batch)> evaluate;
  bool classifier = false;  // evaluate() counts correct predictions: report accuracy
};

// Moves a batch's tensors to `device`, where the model is (from a pinned loader, asynchronously); on the CPU
// it leaves them as they are.
void to_device(Example& batch, Device device);

// Batches {x, y} with y i64 class indices: cross entropy of forward(x); accuracy by argmax.
Task classification_task(std::function<Tensor(const Tensor& x)> forward);
// Batches {x, y} of token ids [B, T]: the model's mean next-token cross entropy.
Task language_model_task(GPT& model);

}  // namespace mantissa
