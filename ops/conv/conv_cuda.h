// The CUDA kernels of ops/conv/conv.cc: cuDNN (ops/conv/conv_launch.h) on the device's current stream. Tensors are
// contiguous and on one device; undefined ones are the gradients nobody needs (and the bias, the input
// or the weight when absent or not saved). Declared in every build; defined in conv.cu, which only CUDA builds
// compile.
#pragma once

#include "framework/tensor.h"
#include "ops/conv/conv_cpu.h"

namespace mantissa {

void cuda_conv2d(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& out);
void cuda_conv2d_backward(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          const Tensor& dx, const Tensor& dw, const Tensor& db);

}  // namespace mantissa
