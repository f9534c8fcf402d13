// The CUDA kernels of ops/pool/pool.cc (ops/pool/pool.cu, written to equal the CPU kernels bit for bit). Tensors are
// contiguous and on one device. Declared in every build; defined in pool.cu, which only CUDA builds
// compile.
#pragma once

#include "framework/tensor.h"
#include "ops/pool/pool_cpu.h"

namespace mantissa {

void cuda_max_pool2d(const cpu::Pool2dGeometry& g, const Tensor& x, const Tensor& out, const Tensor& indices);
void cuda_max_pool2d_backward(const cpu::Pool2dGeometry& g, const Tensor& dy, const Tensor& indices, const Tensor& dx);
void cuda_avg_pool2d(const cpu::Pool2dGeometry& g, const Tensor& x, const Tensor& out);
void cuda_avg_pool2d_backward(const cpu::Pool2dGeometry& g, const Tensor& dy, const Tensor& dx);

}  // namespace mantissa
