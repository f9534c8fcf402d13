// Per-row math of the CUDA softmax, log_softmax and cross-entropy kernels as __host__ __device__
// functions (host tests compare them with the CPU kernels): the online max/sum-of-exps that a thread
// keeps over its share of a row and merges with other threads', and the row geometry.
#pragma once

#include <cstdint>

#include "ops/pointwise_math.h"
#include "ops/softmax/softmax.h"

namespace mantissa::gpu {

// Running (max m, sum of exp(x - m)) over the values seen so far; s == 0 means none counted yet (or
// only -inf), which keeps exp(-inf - -inf) = NaN out of the merge. A NaN makes s NaN, so the row's
// results are NaN, as on the CPU.
template <typename C>
struct MaxSum {
  C m, s;
};

template <typename C>
MT_HD inline MaxSum<C> max_sum_identity() {
  return {-static_cast<C>(INFINITY), C(0)};
}

template <typename C>
MT_HD inline void max_sum_add(MaxSum<C>& a, C x) {
  if (x > a.m) {
    a.s = (a.s == C(0) ? C(0) : a.s * hd_exp(a.m - x)) + C(1);
    a.m = x;
  } else if (!(x == a.m && x == -static_cast<C>(INFINITY))) {
    a.s += hd_exp(x - a.m);  // a NaN x lands here and makes s NaN
  }
}

template <typename C>
MT_HD inline MaxSum<C> max_sum_merge(MaxSum<C> a, MaxSum<C> b) {
  const C m = a.m > b.m ? a.m : b.m;
  if (a.s != a.s || b.s != b.s) return {m, a.s + b.s};  // NaN stays NaN
  const C sa = a.s == C(0) ? C(0) : a.s * hd_exp(a.m - m);
  const C sb = b.s == C(0) ? C(0) : b.s * hd_exp(b.m - m);
  return {m, sa + sb};
}

// Threads per row: a warp for rows up to 1024 elements (a block then holds 8 rows), a 256-thread block
// for longer ones (e.g. a vocabulary of 50k).
inline int softmax_threads_per_row(int64_t dim) { return dim <= 1024 ? 32 : 256; }

// The row kernels (softmax, cross-entropy, layer_norm) give each group of TPR threads a row and then
// stride over the grid, so any row count launches: a grid of one block per row group would pass
// gridDim.x's limit (and wrap when cast to unsigned) for very many rows. 65535 blocks of 256 threads are
// far more than a GPU keeps resident, and few enough that a test with more rows walks the stride loop.
inline constexpr int64_t kMaxRowBlocks = 65535;
inline unsigned row_launch_blocks(int64_t rows, int rows_per_block) {
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > kMaxRowBlocks) blocks = kMaxRowBlocks;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// The rows of thread group `group` (of `rows_per_block` in block `block` of a `grid`-block launch):
// first, first + step, ... A group's threads share their rows, so they leave the loop together (a whole
// warp, or the whole block when a row takes it, which keeps __syncthreads and full-mask shuffles valid).
struct RowLoop {
  int64_t first, step;
};
MT_HD inline RowLoop row_loop(unsigned block, unsigned grid, unsigned group, int rows_per_block) {
  return {int64_t{block} * rows_per_block + group, int64_t{grid} * rows_per_block};
}

}  // namespace mantissa::gpu

namespace mantissa::gpu {

// layer_norm's dweight/dbias are column sums over the rows. A block covers 32 columns and one slice of
// the rows; slices (enough blocks for ~2 per SM, each slice at least 64 rows) go to a workspace that a
// final pass adds up in slice order, so the result is deterministic for a device.
inline int64_t column_slices(int64_t rows, int64_t cols, int sm_count) {
  const int64_t col_blocks = (cols + 31) / 32;
  const int64_t want = (2 * int64_t{sm_count > 0 ? sm_count : 1} + col_blocks - 1) / col_blocks;
  const int64_t most = (rows + 63) / 64;
  int64_t s = want < most ? want : most;
  if (s > 4096) s = 4096;
  return s < 1 ? 1 : s;
}

}  // namespace mantissa::gpu
