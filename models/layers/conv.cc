// Conv2d layer over ops/conv/conv.h's conv2d().
#include "models/layers/conv.h"

#include "framework/error.h"
#include "models/layers/init.h"
#include "ops/conv/conv.h"

namespace mantissa {

Conv2d::Conv2d(int64_t in, int64_t out, std::array<int64_t, 2> k, Conv2dLayerOptions opts)
    : in_channels(in), out_channels(out), options(opts) {
  MT_CHECK(opts.groups > 0 && in % opts.groups == 0 && out % opts.groups == 0, "Conv2d: in_channels ", in,
           " and out_channels ", out, " must both be divisible by groups ", opts.groups);
  MT_CHECK(k[0] > 0 && k[1] > 0, "Conv2d: kernel_size must be positive, got [", k[0], ", ", k[1], "]");
  const int64_t fan_in = in / opts.groups * k[0] * k[1];
  weight = register_parameter("weight",
                              fan_in_uniform({out, in / opts.groups, k[0], k[1]}, fan_in, opts.dtype, opts.generator));
  if (opts.bias) bias = register_parameter("bias", fan_in_uniform({out}, fan_in, opts.dtype, opts.generator));
}

Tensor Conv2d::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    MT_CHECK(in.dim() == 4 && in.size(1) == in_channels, "Conv2d: expected an input [N, ", in_channels, ", H, W], got ",
             shape_str(in.shape()));
    return conv2d(
        in, weight, bias,
        {.stride = options.stride, .padding = options.padding, .dilation = options.dilation, .groups = options.groups});
  });
}

}  // namespace mantissa
