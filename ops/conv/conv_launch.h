// conv2d on CUDA through cuDNN 9 (its convolution API): forward, backward data, backward filter and the
// bias gradient, NCHW, over contiguous device buffers. f32 (exact f32 unless set_cuda_conv_tf32(kOn)),
// f64, and f16/bf16 accumulating in f32 and rounding once. The algorithm is chosen once per shape (cuDNN's
// heuristics under a workspace limit) and cached. Only for CUDA-only files (.cu, host/*.cc).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "ops/conv/conv_cpu.h"

namespace mantissa::gpu {

// Shapes as cpu::Conv2dGeometry: x [N, C, H, W], w [O, C/G, KH, KW], y [N, O, OH, OW], bias [O]; every
// pointer on GPU `device`, work queued on `stream`. T is float, double, Half or BFloat16.

// y = conv(x, w) (+ bias, added before the one rounding); bias may be null.
template <typename T>
void conv2d_forward(const cpu::Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y, int device,
                    cudaStream_t stream);
// dx = the gradient of the input from dy and w.
template <typename T>
void conv2d_backward_data(const cpu::Conv2dGeometry& g, const T* dy, const T* w, T* dx, int device,
                          cudaStream_t stream);
// dw = the gradient of the weight from x and dy (zero when N == 0).
template <typename T>
void conv2d_backward_filter(const cpu::Conv2dGeometry& g, const T* x, const T* dy, T* dw, int device,
                            cudaStream_t stream);
// db[o] = sum of dy[:, o, :, :] (zero when N == 0).
template <typename T>
void conv2d_backward_bias(const cpu::Conv2dGeometry& g, const T* dy, T* db, int device, cudaStream_t stream);

// Plans (descriptors and a chosen algorithm) built and reused since the process started, all threads.
struct ConvStats {
  int64_t plans_built = 0;
  int64_t plan_hits = 0;
};
ConvStats conv_stats();

}  // namespace mantissa::gpu
