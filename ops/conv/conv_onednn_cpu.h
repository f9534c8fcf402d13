// conv2d through oneDNN's convolution primitives (forward, backward data, backward weights) for f32 and
// bf16, on plain NCHW / OIHW buffers. oneDNN picks its own blocked layouts (AVX-512 / AMX kernels) and we
// reorder into and out of them. Each call returns false, having written nothing, when oneDNN has no
// implementation for the case; the caller then uses im2col + GEMM.
#pragma once

#include "framework/half.h"
#include "ops/conv/conv_cpu.h"

namespace mantissa::cpu {

// y = conv(x, w) + bias; bias is f32 [O] or null. T is float or BFloat16 (accumulates in f32, rounds once).
template <typename T>
bool onednn_conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const float* bias, T* y);
// dx = conv_transpose(dy, w), accumulated in f32 and written once as T.
template <typename T>
bool onednn_conv2d_backward_data(const Conv2dGeometry& g, const T* dy, const T* w, T* dx);
// dw [O, C/G, KH, KW] and db [O] (null when not needed) as f32 sums over the batch.
template <typename T>
bool onednn_conv2d_backward_weights(const Conv2dGeometry& g, const T* x, const T* dy, float* dw, float* db);

}  // namespace mantissa::cpu
