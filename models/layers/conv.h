// Conv2d: 2-D convolution over [N, C, H, W], as torch.nn.Conv2d, with its default initialisation.
#pragma once

#include <array>

#include "framework/generator.h"
#include "framework/module.h"

namespace mantissa {

struct Conv2dLayerOptions {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  DType dtype = DType::kF32;
  Generator* generator = nullptr;  // default_generator() when null
};

class Conv2d : public Module {
 public:
  // Conv2d(3, 16, {3, 3}, {.padding = {1, 1}})
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Conv2dLayerOptions options = {});
  std::string type_name() const override { return "Conv2d"; }
  // [N, in_channels, H, W] -> [N, out_channels, H', W']
  Tensor forward(const Tensor& x);

  int64_t in_channels, out_channels;
  Conv2dLayerOptions options;
  Tensor weight;  // [out_channels, in_channels / groups, kH, kW]
  Tensor bias;    // [out_channels]; undefined without bias
};

}  // namespace mantissa
