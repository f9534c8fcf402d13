// Launchers of the CUDA index kernels (ops/shape/shape.cu): index_select rows and their scatter-add,
// gather / scatter-add along a dim, one_hot, nll_loss. Indices are i64 device arrays that are NOT
// range-checked on the host (that would need a synchronization): an out-of-range index gives NaN
// (floating outputs) or 0 (integer outputs) in the forward and is dropped by the scatter-adds.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/half.h"
#include "ops/loss/loss.h"  // Reduction
#include "ops/shape/index_math.h"

namespace mantissa::gpu {

// out[o, i, :] = x[o, index[i], :] for x [outer, size, inner] and out [outer, n_index, inner], contiguous.
template <typename T>
void launch_index_select(const T* x, const int64_t* index, int64_t n_index, int64_t outer, int64_t size, int64_t inner,
                         T* out, cudaStream_t stream);
// acc[o, index[i], :] += grad[o, i, :] with atomic adds in A (float for 16-bit, else T).
template <typename T, typename A>
void launch_index_add(const T* grad, const int64_t* index, int64_t n_index, int64_t outer, int64_t size, int64_t inner,
                      A* acc, cudaStream_t stream);

// out[index[i], :] = src[i, :] for out [size, inner] and src [n_index, inner] (index_put's replace mode;
// with repeated indices one of the rows wins, unordered as in PyTorch on a GPU).
template <typename T>
void launch_index_copy(const T* src, const int64_t* index, int64_t n_index, int64_t size, int64_t inner, T* out,
                       cudaStream_t stream);

// out[p] = x[gather_offset(g, p, index[p])] for every position p of the index; out contiguous.
template <typename T>
void launch_gather(const T* x, const int64_t* index, GatherGeometry g, T* out, cudaStream_t stream);
// acc[gather_offset(g, p, index[p])] += src[p] (src contiguous of the index's shape) with atomic adds.
template <typename T, typename A>
void launch_scatter_add(const T* src, const int64_t* index, GatherGeometry g, A* acc, cudaStream_t stream);

// out [n, classes] (zeroed by the caller) gets out[i, index[i]] = 1 where index[i] is in range.
void launch_one_hot(const int64_t* index, int64_t n, int64_t classes, int64_t* out, cudaStream_t stream);

// nll over log_probs [batch, classes, inner] (contiguous) and targets [batch * inner]:
// loss[p] = -x[b, target[p], i] in C, 0 where target == ignore_index, NaN where out of range.
template <typename T, typename C>
void launch_nll_forward(const T* log_probs, const int64_t* target, int64_t batch, int64_t classes, int64_t inner,
                        int64_t ignore_index, C* loss, cudaStream_t stream);
// dx = -scale[p] at [b, target[p], i], 0 elsewhere; scale = grad[p] (kNone), grad[0] (kSum) or
// grad[0] / count[0] (kMean), formed in double and rounded to C as on the CPU.
template <typename T, typename C>
void launch_nll_backward(const int64_t* target, const T* grad, const double* count, Reduction reduction, int64_t batch,
                         int64_t classes, int64_t inner, int64_t ignore_index, T* dx, cudaStream_t stream);

}  // namespace mantissa::gpu
