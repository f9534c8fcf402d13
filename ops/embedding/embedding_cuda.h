// The CUDA kernels of ops/embedding/embedding.cc. Declared in every build; defined in embedding.cu, which only CUDA
// builds compile.
#pragma once

#include "framework/tensor.h"

namespace mantissa {

// out[i, :] = weight[idx[i], :] (weight contiguous [V, D], idx flattened i64 on the device).
void cuda_embedding(const Tensor& weight, const Tensor& idx, const Tensor& out);
// Atomic adds into a zeroed f32 (f64) table, rounded once to the weight's dtype.
Tensor cuda_embedding_backward(const Tensor& g, const Tensor& idx, const Shape& weight_shape, DType weight_dtype);

}  // namespace mantissa
