// Launchers of the CUDA layer_norm kernels (ops/norm/layer_norm.cu) over x [rows, cols] (contiguous). Values
// compute in P = float (double for f64) and round once; weight, bias and the saved statistics are P
// arrays, as the CPU kernels take them (ops/norm/norm_cpu.h).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>
#include <type_traits>

#include "framework/half.h"
#include "ops/softmax/row_math.h"

namespace mantissa::gpu {

template <typename T>
using param_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// y = (x - mean) * rstd * w + b per row (w, b may be null); writes mean[rows] and rstd[rows].
template <typename T>
void launch_layer_norm_forward(int64_t rows, int64_t cols, double eps, const T* x, const param_t<T>* w,
                               const param_t<T>* b, T* y, param_t<T>* mean, param_t<T>* rstd, cudaStream_t stream);
// dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)) per row.
template <typename T>
void launch_layer_norm_backward_input(int64_t rows, int64_t cols, const T* dy, const T* x, const param_t<T>* mean,
                                      const param_t<T>* rstd, const param_t<T>* w, T* dx, cudaStream_t stream);
// The number of row slices for the parameter gradients on `device` (column_slices with its SM count).
int64_t layer_norm_param_slices(int64_t rows, int64_t cols, int device);
// dw = sum over rows of dy xhat, db = sum of dy (either may be null); `workspace` holds
// 2 * slices * cols values of P when slices > 1.
template <typename T>
void launch_layer_norm_backward_params(int64_t rows, int64_t cols, int64_t slices, const T* dy, const T* x,
                                       const param_t<T>* mean, const param_t<T>* rstd, param_t<T>* workspace,
                                       param_t<T>* dw, param_t<T>* db, cudaStream_t stream);

}  // namespace mantissa::gpu
