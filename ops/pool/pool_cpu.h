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

// y = sum of the window (zero padding included) / (KH * KW).
template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& g, const T* x, T* y);
template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& g, const T* dy, T* dx);

}  // namespace mantissa::cpu
