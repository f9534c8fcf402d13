// Launchers of the CUDA softmax, log_softmax and fused cross-entropy kernels (ops/softmax/softmax.cu).
// Rows follow a RowGeometry (ops/softmax/row_math.h); values compute in f32 (f64 for f64) and round once.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/half.h"
#include "ops/loss/loss.h"
#include "ops/softmax/row_math.h"

namespace mantissa::gpu {

// y = softmax(x) or log_softmax(x) along each row.
template <typename T>
void launch_softmax_forward(RowGeometry g, SoftmaxKind kind, const T* x, T* y, cudaStream_t stream);
// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
template <typename T>
void launch_softmax_backward(RowGeometry g, SoftmaxKind kind, const T* dy, const T* y, T* dx, cudaStream_t stream);

// Cross-entropy over logits [batch, classes, inner] (RowGeometry with dim = classes) and targets
// [batch * inner]: loss[p] = lse[p] - x[p, target[p]], 0 where target == ignore_index and NaN where the
// target is out of range (the device cannot throw; the CPU path validates). C = float (double for f64).
template <typename T, typename C>
void launch_cross_entropy_forward(RowGeometry g, const T* logits, const int64_t* target, int64_t ignore_index, C* loss,
                                  C* lse, cudaStream_t stream);
// The loss tensor from per-position losses: kNone rounds each to T; kMean / kSum add them in f64 (as the
// CPU) and write one T, kMean dividing by the count of non-ignored targets. count[0] receives that count
// (as a double) for the backward. One block: no host synchronization.
template <typename T, typename C>
void launch_loss_reduce(int64_t positions, Reduction reduction, const C* loss, const int64_t* target,
                        int64_t ignore_index, T* out, double* count, cudaStream_t stream);
// dlogits = (exp(x - lse) - onehot(target)) * scale, scale = grad[p] (kNone), grad[0] (kSum) or
// grad[0] / count[0] (kMean); rows of ignored targets are 0.
template <typename T, typename C>
void launch_cross_entropy_backward(RowGeometry g, Reduction reduction, const T* logits, const int64_t* target,
                                   const C* lse, const T* grad, const double* count, int64_t ignore_index, T* dlogits,
                                   cudaStream_t stream);

}  // namespace mantissa::gpu
