// Conv2d then BatchNorm2d in eval mode as one convolution: the batch norm's running statistics and affine
// parameters folded into the convolution's weight and bias (the inference rewrite of PyTorch's
// torch.fx fuse_conv_bn_eval, here without a graph rewrite):
//   s = gamma / sqrt(running_var + eps),  w' = w * s (per output channel),  b' = (b - running_mean) * s + beta.
// One pass over the activations instead of two; the result equals bn(conv(x)) up to rounding (the fold
// rounds w * s once in f32). The fold is made of differentiable ops, so gradients still reach conv and bn.
#pragma once

#include "framework/tensor.h"
#include "models/layers/conv.h"
#include "models/layers/norm.h"

namespace mantissa {

// Whether conv2d_batch_norm_eval may stand for bn(conv(x)): bn in eval mode with running statistics, and
// neither module with hooks (a fold would skip them).
bool can_fold_batch_norm(const Conv2d& conv, const BatchNorm2d& bn);

// bn(conv(x)) with bn in eval mode, as one convolution of the folded weight and bias.
Tensor conv2d_batch_norm_eval(const Conv2d& conv, const BatchNorm2d& bn, const Tensor& x);

}  // namespace mantissa
