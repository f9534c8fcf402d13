// Host-side parts of the CUDA softmax, cross-entropy and layer_norm kernels, run on the CPU: the online
// (max, sum of exps) that threads keep and merge gives the CPU's logsumexp in any split and merge
// order (and NaN / -inf rows as the CPU), the row geometry, and the launch choices.
#include "ops/softmax/row_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "ops/reduce/reduce.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

// logsumexp of v as the kernels compute it: `parts` threads each take every parts-th element, then the
// partial results merge in a shuffled order.
float online_lse(const std::vector<float>& v, int parts, std::mt19937& rng) {
  std::vector<gpu::MaxSum<float>> acc(static_cast<size_t>(parts), gpu::max_sum_identity<float>());
  for (size_t i = 0; i < v.size(); ++i) gpu::max_sum_add(acc[i % static_cast<size_t>(parts)], v[i]);
  std::shuffle(acc.begin(), acc.end(), rng);
  gpu::MaxSum<float> total = acc[0];
  for (size_t k = 1; k < acc.size(); ++k) total = gpu::max_sum_merge(total, acc[k]);
  return total.m + std::log(total.s);
}

TEST(CudaRowMath, OnlineMaxSumGivesTheCpuLogsumexp) {
  std::mt19937 rng(3);
  for (int n : {1, 5, 31, 32, 33, 1000, 4099}) {
    const Tensor x = testing::random_tensor({n}, DType::kF32, static_cast<uint64_t>(n), -30.0, 30.0);
    const std::vector<float> v(x.data<float>(), x.data<float>() + n);
    const double want = logsumexp(x, {0}).item();
    for (int parts : {1, 32, 256}) {
      // Different association of the same f32 sum of exps (each within 2 ulp): relative 1e-6 on a
      // logsumexp of magnitude >= 1 covers n up to a few thousand terms.
      EXPECT_NEAR(online_lse(v, parts, rng), want, 1e-6 * std::max(1.0, std::abs(want))) << n << " " << parts;
    }
  }
}

TEST(CudaRowMath, MinusInfinityAndNaNRows) {
  std::mt19937 rng(4);
  const float inf = std::numeric_limits<float>::infinity();
  // Masked entries (-inf) contribute nothing, even as a thread's first values.
  EXPECT_NEAR(online_lse({-inf, -inf, 0.0f, -inf}, 2, rng), 0.0f, 1e-7);
  EXPECT_NEAR(online_lse({-inf, 1.0f, -inf, 1.0f}, 4, rng), 1.0f + std::log(2.0f), 1e-6);
  // A row of only -inf: max -inf and sum 0, so the logsumexp is -inf as the CPU's logsumexp, and the
  // softmax exp(x - m) / s is NaN as the CPU's softmax. A NaN anywhere makes the row NaN.
  EXPECT_EQ(online_lse({-inf, -inf, -inf}, 2, rng), -inf);
  EXPECT_TRUE(std::isnan(online_lse({0.0f, std::nanf(""), 2.0f, 1.0f}, 2, rng)));
}

TEST(CudaRowMath, RowGeometryAndLaunchChoices) {
  const RowGeometry g{.outer = 3, .dim = 5, .inner = 4};
  EXPECT_EQ(g.rows(), 12);
  EXPECT_EQ(g.base(0), 0);
  EXPECT_EQ(g.base(3), 3);       // outer 0, inner 3
  EXPECT_EQ(g.base(5), 20 + 1);  // outer 1, inner 1
  EXPECT_EQ(gpu::softmax_threads_per_row(1024), 32);
  EXPECT_EQ(gpu::softmax_threads_per_row(1025), 256);
  EXPECT_EQ(gpu::column_slices(8192, 768, 132), 11);  // 24 column blocks, ~264 blocks wanted
  EXPECT_EQ(gpu::column_slices(10, 768, 132), 1);     // too few rows to slice
  EXPECT_EQ(gpu::column_slices(1 << 24, 32, 132), 264);
}

// The row kernels' grid: at most kMaxRowBlocks blocks (never wrapped by the cast to unsigned), and the
// groups' grid-stride loops visit every row exactly once, with or without more rows than the grid holds.
TEST(CudaRowMath, RowLoopCoversEveryRowOnceAtAnyCount) {
  EXPECT_EQ(gpu::row_launch_blocks(0, 8), 1u);
  EXPECT_EQ(gpu::row_launch_blocks(9, 8), 2u);
  EXPECT_EQ(gpu::row_launch_blocks(int64_t{1} << 40, 8), static_cast<unsigned>(gpu::kMaxRowBlocks));
  EXPECT_EQ(gpu::row_launch_blocks(int64_t{1} << 35, 1), static_cast<unsigned>(gpu::kMaxRowBlocks));
  const int64_t past_grid = gpu::kMaxRowBlocks * 8 + 13;  // warp mode: 8 rows per block
  for (const auto& [rows, per_block] : std::vector<std::pair<int64_t, int>>{
           {1, 8}, {7, 8}, {8, 8}, {1000, 8}, {past_grid, 8}, {5, 1}, {gpu::kMaxRowBlocks + 1, 1}, {200000, 1}}) {
    const unsigned grid = gpu::row_launch_blocks(rows, per_block);
    ASSERT_LE(grid, static_cast<unsigned>(gpu::kMaxRowBlocks));
    std::vector<int> seen(static_cast<size_t>(rows), 0);
    for (unsigned block = 0; block < grid; ++block) {
      for (int group = 0; group < per_block; ++group) {
        const gpu::RowLoop loop = gpu::row_loop(block, grid, static_cast<unsigned>(group), per_block);
        for (int64_t row = loop.first; row < rows; row += loop.step) ++seen[static_cast<size_t>(row)];
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), rows) << rows << " rows, " << per_block << " per block";
  }
}

}  // namespace
}  // namespace mantissa
