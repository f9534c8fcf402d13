#include "models/layers/conv_bn.h"

#include "framework/error.h"
#include "ops/conv/conv.h"
#include "ops/elementwise/elementwise.h"

namespace mantissa {

bool can_fold_batch_norm(const Conv2d& conv, const BatchNorm2d& bn) {
  return !bn.is_training() && bn.running_mean.defined() && bn.running_var.defined() && !conv.has_hooks() &&
         !bn.has_hooks() && bn.num_features == conv.weight.size(0);
}

Tensor conv2d_batch_norm_eval(const Conv2d& conv, const BatchNorm2d& bn, const Tensor& x) {
  MT_CHECK(can_fold_batch_norm(conv, bn), "conv2d_batch_norm_eval: the batch norm must be in eval mode with running ",
           "statistics, over the convolution's ", conv.weight.size(0), " output channels (got ", bn.num_features,
           "), and neither module may have hooks");
  MT_CHECK(x.dim() == 4 && x.size(1) == conv.in_channels, "Conv2d: expected an input [N, ", conv.in_channels,
           ", H, W], got ", shape_str(x.shape()));
  const int64_t o = conv.weight.size(0);
  // Per output channel, in the running statistics' dtype (f32 masters).
  Tensor scale = rsqrt(bn.running_var + bn.options.eps);
  if (bn.weight.defined()) scale = scale * bn.weight;
  Tensor shift = conv.bias.defined() ? conv.bias - bn.running_mean : neg(bn.running_mean);
  shift = shift * scale;
  if (bn.bias.defined()) shift = shift + bn.bias;
  const Tensor weight = conv.weight * scale.reshape({o, 1, 1, 1}).to(conv.weight.dtype());
  const Conv2dLayerOptions& c = conv.options;
  return conv2d(x, weight, shift.to(conv.weight.dtype()),
                {.stride = c.stride, .padding = c.padding, .dilation = c.dilation, .groups = c.groups});
}

}  // namespace mantissa
