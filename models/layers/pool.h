// MaxPool2d layer: max over kernel windows of [N, C, H, W], as torch.nn.MaxPool2d. No parameters.
#pragma once

#include "framework/module.h"
#include "ops/pool/pool.h"

namespace mantissa {

class MaxPool2d : public Module {
 public:
  // MaxPool2d({.kernel_size = {2, 2}}): stride defaults to the kernel size.
  explicit MaxPool2d(Pool2dOptions options) : options_(options) {}
  std::string type_name() const override { return "MaxPool2d"; }
  // [N, C, H, W] -> [N, C, H', W']
  Tensor forward(const Tensor& x);

 private:
  Pool2dOptions options_;
};

}  // namespace mantissa
