// The GradScaler's CPU passes over one grad (amp/unscale_grads.cc calls them per parameter); the CUDA
// ones are amp/cuda/amp_kernels.h. T is float or double.
#pragma once

#include <cstdint>

namespace mantissa::cpu {

// PyTorch's _amp_foreach_non_finite_check_and_unscale_ on one tensor: *found_inf = 1 if any g is inf or
// nan (checked before scaling, as PyTorch does), and g *= inv_scale in place.
template <typename T>
void unscale_and_check(T* g, int64_t n, const float* inv_scale, float* found_inf);
// The check alone, reading g only: what a fused step needs before it runs.
template <typename T>
void check_finite(const T* g, int64_t n, float* found_inf);

}  // namespace mantissa::cpu
