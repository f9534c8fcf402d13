// layer_norm and batch_norm kernels over raw pointers. Values of type T (f32, f64, f16, bf16) compute in
// C = compute_t<T> and round once at the output; per-feature parameters and statistics are passed
// already widened to C (they are small), so the kernels take T only for the big tensors.
#pragma once

#include <cstdint>

#include "framework/dtype.h"
#include "ops/pool/pool_cpu.h"

namespace mantissa::cpu {

// layer_norm over x [rows, cols] (cols = the normalized shape flattened).
struct LayerNormGeometry {
  int64_t rows = 0, cols = 0;
  double eps = 1e-5;
};
// y = (x - mean) * rstd * w + b per row; w, b may be null (1 and 0). Writes mean[rows] and
// rstd[rows] = 1 / sqrt(biased var + eps) for backward.
template <typename T>
void layer_norm_forward(const LayerNormGeometry& g, const T* x, const compute_t<T>* w, const compute_t<T>* b, T* y,
                        compute_t<T>* mean, compute_t<T>* rstd);
// sum = x + delta (widened to the compute type, one rounding to T, as add computes it), then layer_norm of
// sum as stored, in one pass over each row. delta is T, or f16/bf16 with an f32 x (autocast's residual
// stream: an f32 sum of 16-bit branch outputs).
template <typename T, typename D>
void add_layer_norm_forward(const LayerNormGeometry& g, const T* x, const D* delta, const compute_t<T>* w,
                            const compute_t<T>* b, T* sum, T* y, compute_t<T>* mean, compute_t<T>* rstd);
// dx (may be null), dw and db (each may be null; [cols], written, not accumulated). The sums over rows
// run in fixed blocks and add up in block order, so results do not depend on the thread count.
template <typename T>
void layer_norm_backward(const LayerNormGeometry& g, const T* dy, const T* x, const compute_t<T>* mean,
                         const compute_t<T>* rstd, const compute_t<T>* w, T* dx, compute_t<T>* dw, compute_t<T>* db);

// batch_norm over x [n, channels, spatial] (spatial = H*W, or 1 for [N, C] input).
struct BatchNormGeometry {
  int64_t n = 0, channels = 0, spatial = 1;
  int64_t count() const { return n * spatial; }  // elements per channel
};
// Per-channel mean and biased variance of x.
template <typename T>
void batch_norm_stats(const BatchNormGeometry& g, const T* x, compute_t<T>* mean, compute_t<T>* var);
// y = (x - mean[c]) * invstd[c] * w[c] + b[c]; w, b may be null.
template <typename T>
void batch_norm_apply(const BatchNormGeometry& g, const T* x, const compute_t<T>* mean, const compute_t<T>* invstd,
                      const compute_t<T>* w, const compute_t<T>* b, T* y);
// With xhat = (x - mean) * invstd: dw[c] = sum dy*xhat, db[c] = sum dy; dx = w*invstd*dy in eval mode
// (statistics are constants), and w*invstd*(dy - db/M - xhat*dw/M) in train mode (they depend on x).
enum class BatchStats { kFromBatch, kConstant };
template <typename T>
void batch_norm_backward(const BatchNormGeometry& g, BatchStats stats, const T* dy, const T* x,
                         const compute_t<T>* mean, const compute_t<T>* invstd, const compute_t<T>* w, T* dx,
                         compute_t<T>* dw, compute_t<T>* db);

// The CNN block's tail as one kernel: out = relu(max_pool2d(batch_norm(x), 2x2, stride 2)) over x
// [n, channels, h, w] (geometry.spatial = h * w), out [n, channels, h / 2, w / 2]. Each normalized value is
// computed with batch_norm_apply's formula and rounded to T as batch_norm would round it, so the maximum,
// its position and the output are the composition's, bit for bit. winner[o] records the window position
// (0..3, row by row) of output o's maximum, or kDeadWindow (ops/pool/pool_cpu.h) where the ReLU gave 0 (no gradient
// flows), and winner_x[o] that input value itself (what the backward's channel sums need, read at pooled size).
template <typename T>
void batch_norm_relu_pool_forward(const BatchNormGeometry& g, int64_t h, int64_t w, const T* x,
                                  const compute_t<T>* mean, const compute_t<T>* invstd, const compute_t<T>* weight,
                                  const compute_t<T>* bias, T* out, uint8_t* winner, T* winner_x);
// Its backward from dout [n, channels, h / 2, w / 2]: the batch norm's dy is dout at each live winner and 0
// elsewhere, so the channel sums run over the pooled grid only and dx is written in one pass. dw, db as
// batch_norm_backward (each may be null, as dx).
template <typename T>
void batch_norm_relu_pool_backward(const BatchNormGeometry& g, BatchStats stats, int64_t h, int64_t w, const T* dout,
                                   const uint8_t* winner, const T* winner_x, const T* x, const compute_t<T>* mean,
                                   const compute_t<T>* invstd, const compute_t<T>* weight, T* dx, compute_t<T>* dw,
                                   compute_t<T>* db);

}  // namespace mantissa::cpu
