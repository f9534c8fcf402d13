// Synchronized batch normalisation (torch.nn.SyncBatchNorm): in training, the batch statistics of x
// [N, C, *] cover the global batch, every rank's x, so that N ranks with batch B normalise as one process
// with batch N x B would; and the differentiable all-reduce it is built from.
//
//   auto pg = init_process_group();  // under mpirun
//   CNN model;
//   convert_sync_batchnorm(model, *pg);  // bn1 and bn2 now use the statistics of all ranks
//   DistributedDataParallel ddp(model, *pg);
//
// Each training forward of a synchronized BatchNorm2d is one all-reduce of 3 x C x world-size values (every
// rank's count, mean and sum of squared deviations), and its backward one more of the same size: every
// rank must run the same forwards and backwards (as DDP requires anyway). Eval mode uses the running
// statistics and communicates nothing.
#pragma once

#include <cstdint>

#include "framework/dist/process_group.h"
#include "framework/module.h"

namespace mantissa {

// The sum of `x` over the ranks of `group` as a new tensor (x is left as it is), differentiable: since the
// output feeds the loss of every rank, the gradient that reaches x is the sum over the ranks of the
// output's gradients, one all-reduce in backward. A collective in forward and in backward.
Tensor all_reduce_sum(const Tensor& x, ProcessGroup& group);

// Training-mode batch normalisation of x [N, C, *] over every rank's x (the ranks' N and * may differ, C
// may not): y = (x - mean) / sqrt(var + eps) * weight + bias with the global mean and biased variance per
// channel, differentiable in x, weight and bias through the statistics of all ranks. Computed in f32 (f64
// for f64 input), y in x's dtype. The statistics are combined stably: each rank's mean and sum of squared
// deviations from it (two passes), merged with the ranks' counts (Chan et al.), never E[x^2] - E[x]^2.
// running_mean/var (both or neither, [C]) are updated in place with the global mean and unbiased
// variance, as torch: running = (1 - momentum) * running + momentum * batch. weight, bias: [C] or
// undefined. The global batch must hold more than one value per channel; a world of one checks it.
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, ProcessGroup& group, double momentum = 0.1, double eps = 1e-5);

// Makes every BatchNorm2d in `model` (the module and all its descendants) synchronized over `group`
// (PyTorch's convert_sync_batchnorm): its training forwards use sync_batch_norm. Names, parameters and
// buffers stay as they are, so checkpoints and optimizers are unaffected. `group` must outlive the model's
// training forwards. Returns how many layers were converted.
int64_t convert_sync_batchnorm(Module& model, ProcessGroup& group);

}  // namespace mantissa
