// Direct conv2d kernels for a single input channel (the first layer of an image model: [N, 1, H, W]),
// stride 1, no padding or dilation, one group. oneDNN's blocked kernels need the [N, O, OH, OW] output
// and its gradient reordered to and from its channel-blocked layout, which for such a layer costs more
// than the convolution itself; these kernels read and write the plain NCHW buffers directly.
#pragma once

#include "framework/half.h"
#include "ops/conv/conv_cpu.h"

namespace mantissa::cpu {

// Whether the direct kernels below handle g.
bool conv2d_direct_supported(const Conv2dGeometry& g);

// y = conv(x, w) + bias (bias f32 [O] or null), accumulated in f32, rounded once. T: float or BFloat16.
template <typename T>
void conv2d_direct_forward(const Conv2dGeometry& g, const T* x, const T* w, const float* bias, T* y);

// dw [O, 1, KH, KW] and db [O] (null when not needed) as f32 sums over the batch.
template <typename T>
void conv2d_direct_backward_weights(const Conv2dGeometry& g, const T* x, const T* dy, float* dw, float* db);

}  // namespace mantissa::cpu
