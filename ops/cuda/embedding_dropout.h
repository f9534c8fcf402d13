// Launchers of the CUDA embedding and dropout kernels (ops/cuda/embedding_dropout.cu). T is float,
// double, Half or BFloat16; A (the gradient accumulator) is float, or double for f64.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/half.h"

namespace mantissa::gpu {

// out[i, :] = weight[indices[i], :] for n indices into a [vocab, width] table; an index outside
// [0, vocab) gives a NaN row (the device cannot throw; the CPU path validates).
template <typename T>
void launch_embedding_forward(const T* weight, const int64_t* indices, int64_t n, int64_t vocab, int64_t width, T* out,
                              cudaStream_t stream);
// acc[indices[i], :] += grad[i, :] with atomic adds in A (order-dependent in the last bits); rows of
// out-of-range indices are dropped. acc must start zeroed.
template <typename T, typename A>
void launch_embedding_backward(const T* grad, const int64_t* indices, int64_t n, int64_t vocab, int64_t width, A* acc,
                               cudaStream_t stream);

// mask[i] = uniform(word position + i of the seed's Philox stream) < keep; out[i] = mask ? x * scale : 0.
template <typename T>
void launch_dropout_forward(uint64_t seed, uint64_t position, float keep, double scale, const T* x, bool* mask, T* out,
                            int64_t n, cudaStream_t stream);
// out[i] = mask[i] ? x[i] * scale : 0 (the backward, on the gradient).
template <typename T>
void launch_dropout_apply(const T* x, const bool* mask, double scale, T* out, int64_t n, cudaStream_t stream);

}  // namespace mantissa::gpu
