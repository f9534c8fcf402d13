// Tensor helpers shared by the normalization entries (ops/norm/norm.cc) and their CUDA side
// (ops/norm/norm.cu).
#pragma once

#include "framework/tensor.h"

namespace mantissa::norm_tensors {

// Per-feature parameters and statistics travel in the compute dtype: f64 for f64, else f32.
inline DType compute_dtype(DType d) { return d == DType::kF64 ? DType::kF64 : DType::kF32; }

// t (defined) as a contiguous tensor of dtype `d` without history, for reading in a kernel.
inline Tensor widened(const Tensor& t, DType d) { return t.detach().to(d).contiguous(); }

template <typename C>
C* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<C>() : nullptr;
}

}  // namespace mantissa::norm_tensors
