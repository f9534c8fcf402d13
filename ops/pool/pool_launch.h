// CUDA max_pool2d and avg_pool2d launchers over raw device pointers, with cpu::Pool2dGeometry. Results
// equal the CPU kernels' bit for bit: the same window scans and the same summation orders
// (ops/cuda/cnn_math.h).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "ops/pool/pool_cpu.h"

namespace mantissa::gpu {

// y and argmax (plane index of the first maximum, as the CPU), a thread per output.
template <typename T>
void launch_max_pool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, int64_t* argmax, cudaStream_t stream);
// dx (every element written) gathers dy from the outputs whose argmax it is, a thread per input.
template <typename T>
void launch_max_pool2d_backward(const cpu::Pool2dGeometry& g, const T* dy, const int64_t* argmax, T* dx,
                                cudaStream_t stream);
template <typename T>
void launch_avg_pool2d_forward(const cpu::Pool2dGeometry& g, const T* x, T* y, cudaStream_t stream);
template <typename T>
void launch_avg_pool2d_backward(const cpu::Pool2dGeometry& g, const T* dy, T* dx, cudaStream_t stream);

}  // namespace mantissa::gpu
