// Pooling kernels over raw pointers. Every (sample, channel) plane [H, W] maps to one [OH, OW] plane;
// planes are independent, so each kernel runs in parallel over them.
#pragma once

#include <cstdint>

#include "framework/dtype.h"

namespace mantissa::cpu {

struct Pool2dGeometry {
  int64_t planes = 0;  // N * C
  int64_t h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 0, kw = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};

// y = max over each window (padding never wins); argmax = ih * W + iw of the first maximum within the
// plane, as PyTorch's indices. A NaN in the window is the maximum.
template <typename T>
void max_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y, int64_t* argmax);
// dx (zeroed by the kernel) gets dy at each saved argmax, summed in the compute type A and rounded once.
template <typename T>
void max_pool2d_backward(const Pool2dGeometry& g, const T* dy, const int64_t* argmax, T* dx);

// One output row of the 2x2, stride 2, unpadded max pool over two input rows r0 and r1 in the compute type
// (float or double): out[ox] is the window's maximum (greater or NaN replaces, visiting row by row) and
// idx[ox] its index, i0 or i1 (r0's and r1's first elements' indices) plus its column. AVX-512 for float
// where the CPU has it. max_pool2d's 2x2 kernels and the fused batch_norm_relu_pool2d share it.
template <typename C>
void max_pool_row(const C* r0, const C* r1, int64_t ow, int64_t i0, int64_t i1, C* out, int64_t* idx);

// The same 2x2 row fused with relu, for batch_norm_relu_pool2d: the maximum of the normalized rows y0, y1
// (max_pool_row's selection), relu'd into out; win[ox] the winning window position (0..3, row by row) or
// kDeadWindow where relu gave 0; wx[ox] the raw input value at the winner (from rows x0, x1).
inline constexpr uint8_t kDeadWindow = 0xFF;
template <typename C>
void max_pool_relu_row(const C* y0, const C* y1, const C* x0, const C* x1, int64_t ow, C* out, uint8_t* win, C* wx);

// y = sum of the window (zero padding included) / (KH * KW).
template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y);
template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx);

}  // namespace mantissa::cpu
