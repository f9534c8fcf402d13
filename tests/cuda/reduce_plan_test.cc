// Host-side parts of the CUDA reductions, run on the CPU: the kept/reduced layout (offsets of every
// (output, element) pair match the CPU's indexing), the split geometry, and the max/argmax combining
// rule, which must give the CPU's sequential answer (first NaN, else first maximum) in any order.
#include "ops/reduce/reduce_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/elementwise/elementwise_plan.h"
#include "ops/reduce/reduce.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

TEST(CudaReducePlan, OffsetsOfKeptAndReducedDims) {
  // x [4, 5, 6] transposed to [6, 5, 4]-shaped view, reducing dims 0 and 2 of the view.
  const Tensor base = testing::random_tensor({4, 5, 6}, DType::kF32, 1);
  const Tensor x = base.permute({2, 1, 0});
  const Shape kept_shape{5}, kept_strides{x.stride(1)};
  const Shape red_shape{6, 4}, red_strides{x.stride(0), x.stride(2)};
  const auto l = gpu::plan_reduce(kept_shape, kept_strides, red_shape, red_strides);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->n_out, 5);
  EXPECT_EQ(l->n_red, 24);
  const auto kept = gpu::make_offset_calc<uint32_t>(l->kept);
  const auto red = gpu::make_offset_calc<uint32_t>(l->reduced);
  const float* p = x.data<float>();
  for (int64_t o = 0; o < 5; ++o) {
    for (int64_t r = 0; r < 24; ++r) {
      uint32_t ko[1], ro[1];
      kept.offsets(static_cast<uint32_t>(o), ko);
      red.offsets(static_cast<uint32_t>(r), ro);
      const int64_t i0 = r / 4, i2 = r % 4;  // reduced elements in row-major order of [6, 4]
      ASSERT_EQ(p[ko[0] + ro[0]], p[i0 * x.stride(0) + o * x.stride(1) + i2 * x.stride(2)]) << o << " " << r;
    }
  }
}

TEST(CudaReducePlan, RowsWhenTheReducedDimIsContiguous) {
  // [rows, cols] contiguous: reducing cols is a row reduction, reducing rows a column one.
  const auto last = gpu::plan_reduce({8}, {64}, {64}, {1});
  const auto first = gpu::plan_reduce({64}, {1}, {8}, {64});
  ASSERT_TRUE(last && first);
  EXPECT_TRUE(last->rows());
  EXPECT_FALSE(first->rows());
}

TEST(CudaReducePlan, GeometrySplitsOnlyWhenOutputsAreFew) {
  constexpr int kSms = 132;
  // Many outputs: one slice each.
  gpu::ReduceGeometry g = gpu::plan_reduce_geometry(1 << 20, 768, true, kSms);
  EXPECT_EQ(g.splits, 1);
  EXPECT_EQ(g.chunk, 768);
  EXPECT_GE(static_cast<int64_t>(g.blocks_x) * 8, std::min<int64_t>(1 << 20, gpu::kMaxBlocks * 8));
  // A full reduction of 10M elements: sliced into chunks of at least kRowChunkMin, covering all.
  g = gpu::plan_reduce_geometry(1, 10'000'000, true, kSms);
  EXPECT_GT(g.splits, 1);
  EXPECT_LE(g.splits, gpu::kMaxSplits);
  EXPECT_GE(g.chunk, gpu::kRowChunkMin);
  EXPECT_GE(g.splits * g.chunk, 10'000'000);
  EXPECT_LT((g.splits - 1) * g.chunk, 10'000'000);  // no empty slice
  // A bias gradient [8192, 768] summed over rows: columns, sliced along the rows.
  g = gpu::plan_reduce_geometry(768, 8192, false, kSms);
  EXPECT_EQ(g.mode, gpu::ReduceMode::kColumns);
  EXPECT_GT(g.splits, 1);
  EXPECT_EQ(g.blocks_y, static_cast<unsigned>(g.splits));
  EXPECT_EQ(g.blocks_x, 3u);
  EXPECT_GE(g.splits * g.chunk, 8192);
  EXPECT_GE(g.chunk, gpu::kColumnChunkMin);
  // Rows shorter than kRowsMinLength take a thread per output.
  EXPECT_EQ(gpu::plan_reduce_geometry(100000, 3, true, kSms).mode, gpu::ReduceMode::kColumns);
  EXPECT_EQ(gpu::plan_reduce_geometry(100000, 16, true, kSms).mode, gpu::ReduceMode::kRows);
  // Short reductions never split.
  EXPECT_EQ(gpu::plan_reduce_geometry(1, 100, true, kSms).splits, 1);
  EXPECT_EQ(gpu::plan_reduce_geometry(1, 100, false, kSms).splits, 1);
}

// The reduced elements that the kernels of reduce.cu visit for output o under geometry g, walking their
// slice loops on the host: rows mode, warp w = o * splits + s with lanes at r0 + lane, r0 + lane + 32, ...;
// columns mode, block row s walking [s * chunk, min(n_red, s * chunk + chunk)). Each visit counts once.
std::vector<int> visits_of_output(const gpu::ReduceGeometry& g, int64_t n_red) {
  std::vector<int> seen(static_cast<size_t>(n_red), 0);
  for (int64_t s = 0; s < g.splits; ++s) {
    const int64_t r0 = s * g.chunk, r1 = std::min(n_red, r0 + g.chunk);
    const int64_t lanes = g.mode == gpu::ReduceMode::kRows ? 32 : 1;
    for (int64_t lane = 0; lane < lanes; ++lane) {
      for (int64_t r = r0 + lane; r < r1; r += lanes) ++seen[static_cast<size_t>(r)];
    }
  }
  return seen;
}

TEST(CudaReducePlan, EmptyAndSizeOneDimsGiveALaunchableGeometry) {
  // A zero-length reduced dim with outputs left (x [4, 0] summed over dim 1) used to divide by a zero
  // chunk here. Every case must give a valid launch (grid dims >= 1, gridDim.y <= 65535) whose slices
  // visit each reduced element of an output exactly once, and none when there are none.
  const std::vector<std::pair<int64_t, int64_t>> cases = {
      {4, 0}, {1, 0}, {0, 0}, {0, 5}, {1 << 20, 0}, {4, 1}, {1, 1}, {1 << 20, 1}, {1, 17}, {3, 5000}, {1, 10'000'000}};
  for (const auto& [n_out, n_red] : cases) {
    for (bool rows : {true, false}) {
      for (int sms : {0, 1, 132}) {
        const gpu::ReduceGeometry g = gpu::plan_reduce_geometry(n_out, n_red, rows, sms);
        const std::string where = "n_out " + std::to_string(n_out) + " n_red " + std::to_string(n_red) + " rows " +
                                  std::to_string(rows) + " sms " + std::to_string(sms);
        EXPECT_GE(g.chunk, 1) << where;
        EXPECT_GE(g.splits, 1) << where;
        EXPECT_LE(g.splits, gpu::kMaxSplits) << where;
        EXPECT_GE(g.blocks_x, 1u) << where;
        EXPECT_LE(static_cast<int64_t>(g.blocks_x), gpu::kMaxBlocks) << where;
        EXPECT_GE(g.blocks_y, 1u) << where;
        EXPECT_LE(g.blocks_y, 65535u) << where;
        if (n_red < gpu::kRowsMinLength) {
          EXPECT_EQ(g.mode, gpu::ReduceMode::kColumns) << where;
        }
        if (g.mode == gpu::ReduceMode::kColumns) {
          EXPECT_EQ(g.blocks_y, static_cast<unsigned>(g.splits)) << where;
        }
        if (n_red <= 1) {
          EXPECT_EQ(g.splits, 1) << where;
        }
        if (n_red > 100'000) continue;  // the visit count below walks every element
        const std::vector<int> seen = visits_of_output(g, n_red);
        EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << where;
      }
    }
  }
}

TEST(CudaReducePlan, EmptyReducedDimPlansEveryOutput) {
  // x [4, 0] over dim 1 and x [4, 1] over dim 1: four outputs with zero and one reduced elements. The
  // kernels then write scale * (the empty or one-term sum); for the empty one that is the CPU's answer,
  // checked here: 0 for sum and NaN for mean (0 * (1/0)). CudaReduce.EmptyAndSizeOneDimsMatchCpu checks
  // the device's on a GPU.
  for (int64_t n : {0, 1}) {
    const Tensor x = zeros({4, n});
    const auto l = gpu::plan_reduce({4}, {x.stride(0)}, {n}, {x.stride(1)});
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->n_out, 4);
    EXPECT_EQ(l->n_red, n);
    const gpu::ReduceGeometry g = gpu::plan_reduce_geometry(l->n_out, l->n_red, l->rows(), 132);
    EXPECT_EQ(g.splits, 1);
    EXPECT_EQ(static_cast<int64_t>(visits_of_output(g, n).size()), n);
  }
  const Tensor s = sum(zeros({4, 0}), {1}), m = mean(zeros({4, 0}), {1});
  ASSERT_EQ(s.numel(), 4);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(s.data<float>()[i], 0.0f);
    EXPECT_TRUE(std::isnan(m.data<float>()[i]));
  }
}

// The CPU's scan: first NaN, else first maximum.
std::pair<float, int64_t> sequential_max(const std::vector<float>& v) {
  float best = v[0];
  int64_t bi = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (std::isnan(best)) break;
    if (std::isnan(v[i]) || v[i] > best) {
      best = v[i];
      bi = static_cast<int64_t>(i);
    }
  }
  return {best, bi};
}

TEST(CudaReducePlan, MaxRuleMatchesSequentialScanInAnyOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 70);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      const unsigned kind = rng() % 20;
      x = kind == 0 ? std::nanf("") : static_cast<float>(rng() % 5);  // many ties, some NaNs
    }
    // Combine in a random order, as lanes and shuffle trees do.
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    float best = v[order[0]];
    int64_t bi = order[0];
    for (int64_t i : order) {
      if (gpu::max_wins(v[i], i, best, bi)) {
        best = v[i];
        bi = i;
      }
    }
    const auto [want, want_i] = sequential_max(v);
    ASSERT_EQ(bi, want_i) << "trial " << trial;
    ASSERT_TRUE(best == want || (std::isnan(best) && std::isnan(want)));
  }
}

}  // namespace
}  // namespace mantissa
