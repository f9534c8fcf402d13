// Normalisation layers: BatchNorm2d (batch statistics in training, running statistics in eval; this
// rank's batch, or with a process group the global batch of all ranks, as torch.nn.SyncBatchNorm) and
// LayerNorm (over the trailing normalized_shape), as torch.nn, initialised to weight 1, bias 0.
#pragma once

#include "framework/module.h"
#include "ops/norm/norm.h"

namespace mantissa {

class ProcessGroup;

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  bool affine = true;     // learnable weight and bias
  DType dtype = DType::kF32;
  // Null: batch statistics of this process's batch. Set (convert_sync_batchnorm in sync_batch_norm.h does
  // it for a whole model): statistics of the global batch of the group's ranks, SyncBatchNorm. Not owned.
  ProcessGroup* process_group = nullptr;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  std::string type_name() const override { return options.process_group ? "SyncBatchNorm" : "BatchNorm2d"; }
  // [N, C, H, W] -> same shape. Training mode normalises with the batch's statistics (the global batch's
  // with a process group) and updates the running buffers (unbiased variance) and num_batches_tracked;
  // eval mode uses the running buffers.
  Tensor forward(const Tensor& x);
  // relu(max_pool2d(forward(x), 2x2, stride 2)): a CNN block's tail, as one op (batch_norm_relu_pool2d) when
  // nothing would notice the fusion (no hooks here, no process group); else the three calls.
  Tensor forward_relu_pool2d(const Tensor& x);

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;               // [C]; undefined when not affine
  Tensor running_mean, running_var;  // [C] buffers: zeros, ones
  Tensor num_batches_tracked;        // 0-d i64 buffer, as in PyTorch's state_dict

 private:
  Tensor forward_unhooked(const Tensor& x);  // forward without the hooks around it
  void count_batch();                        // num_batches_tracked += 1, in training
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  DType dtype = DType::kF32;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  std::string type_name() const override { return "LayerNorm"; }
  // [..., *normalized_shape] -> same shape
  Tensor forward(const Tensor& x);
  // sum = x + delta and forward(sum) as one op (add_layer_norm: a residual add and the norm after it). With
  // hooks on this layer, the add then forward (hooks and all).
  AddLayerNorm forward_add(const Tensor& x, const Tensor& delta);

  Shape normalized_shape;
  LayerNormOptions options;
  Tensor weight, bias;  // normalized_shape; undefined when not elementwise_affine
};

}  // namespace mantissa
