// The multi-tensor launch planner (optim/multi_tensor.h), on the CPU: every element covered exactly once,
// chunks inside their tensor, the per-launch limits kept, tensors split across launches, and the
// parameter block within the kernel-parameter budget.
#include "optim/multi_tensor.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace mantissa {
namespace {

namespace mt = multi_tensor;

// Replays the plan as the kernels would (block -> tensor, chunk -> [begin, end)) and counts how often each
// element is visited.
void check_plan(const std::vector<int64_t>& sizes, mt::Limits limits, const std::string& name) {
  const auto launches = mt::plan(sizes, limits);
  std::vector<std::vector<int>> visits(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) visits[i].assign(static_cast<size_t>(sizes[i]), 0);
  int previous_tensor = -1;
  for (size_t l = 0; l < launches.size(); ++l) {
    const auto& launch = launches[l];
    const std::string at = name + ", launch " + std::to_string(l);
    ASSERT_FALSE(launch.blocks.empty()) << at;
    ASSERT_LE(static_cast<int>(launch.tensors.size()), limits.max_tensors) << at;
    ASSERT_LE(static_cast<int>(launch.blocks.size()), limits.max_blocks) << at;
    for (int t : launch.tensors) {
      ASSERT_GE(t, previous_tensor) << at << ": tensors keep their order";
      ASSERT_GT(sizes[static_cast<size_t>(t)], 0) << at << ": an empty tensor got a slot";
      previous_tensor = t;
    }
    for (const auto& b : launch.blocks) {
      ASSERT_GE(b.tensor, 0) << at;
      ASSERT_LT(b.tensor, static_cast<int>(launch.tensors.size())) << at;
      const int i = launch.tensors[static_cast<size_t>(b.tensor)];
      const int64_t n = sizes[static_cast<size_t>(i)];
      const int64_t begin = b.chunk * limits.chunk_size, end = std::min(n, begin + limits.chunk_size);
      ASSERT_LT(begin, n) << at << ": chunk " << b.chunk << " of tensor " << i << " starts past its end";
      for (int64_t e = begin; e < end; ++e) visits[static_cast<size_t>(i)][static_cast<size_t>(e)] += 1;
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    for (size_t e = 0; e < visits[i].size(); ++e)
      ASSERT_EQ(visits[i][e], 1) << name << ": tensor " << i << " element " << e;
}

TEST(MultiTensorPlan, CoversEveryElementOnce) {
  check_plan({5, 0, 17, 1, 64, 65, 0}, {.max_tensors = 3, .max_blocks = 4, .chunk_size = 16}, "small");
  check_plan({}, {.max_tensors = 3, .max_blocks = 4, .chunk_size = 16}, "no tensors");
  check_plan({0, 0}, {.max_tensors = 3, .max_blocks = 4, .chunk_size = 16}, "only empty tensors");
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int64_t> sizes(1 + rng() % 40);
    for (auto& n : sizes) n = rng() % 5 == 0 ? 0 : 1 + rng() % 300;
    const mt::Limits limits{.max_tensors = 1 + static_cast<int>(rng() % 7),
                            .max_blocks = 1 + static_cast<int>(rng() % 9),
                            .chunk_size = 1 + static_cast<int64_t>(rng() % 50)};
    check_plan(sizes, limits, "trial " + std::to_string(trial));
  }
}

TEST(MultiTensorPlan, SplitsATensorAcrossLaunches) {
  // 10 chunks, 4 blocks per launch: chunks 0-3, 4-7, 8-9 in three launches, the tensor in each.
  const auto launches = mt::plan(std::vector<int64_t>{100}, {.max_tensors = 2, .max_blocks = 4, .chunk_size = 10});
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[1].tensors, std::vector<int>{0});
  EXPECT_EQ(launches[1].blocks.front().chunk, 4);
  EXPECT_EQ(launches[2].blocks.size(), 2u);
  EXPECT_EQ(launches[2].blocks.back().chunk, 9);
}

TEST(MultiTensorPlan, FullTensorListStartsANewLaunch) {
  // Five one-chunk tensors, two per launch: 2 + 2 + 1.
  const auto launches =
      mt::plan(std::vector<int64_t>{1, 2, 3, 4, 5}, {.max_tensors = 2, .max_blocks = 100, .chunk_size = 8});
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].tensors, (std::vector<int>{0, 1}));
  EXPECT_EQ(launches[2].tensors, std::vector<int>{4});
}

TEST(MultiTensorPlan, DefaultLimitsFitTheParameterBudget) {
  // A GPT-sized list (148 tensors, some of 2.4 M elements) in the real limits for Adam's 7 pointers.
  std::vector<int64_t> sizes;
  for (int layer = 0; layer < 12; ++layer)
    for (int64_t n : {768, 768, 2304 * 768, 2304, 768 * 768, 768, 768, 768, 3072 * 768, 3072, 768 * 3072, 768})
      sizes.push_back(n);
  sizes.push_back(50304 * 768);
  check_plan(sizes, {.max_tensors = mt::max_tensors(7)}, "gpt");
  EXPECT_LE(sizeof(mt::TensorListMeta<7>), size_t{mt::kKernelParamBytes - mt::kReservedBytes});
  EXPECT_EQ(mt::max_tensors(1), 110);
  EXPECT_GE(mt::max_tensors(7), 30);
}

TEST(MultiTensorPlan, FillMetaCopiesPointersAndBlocks) {
  std::vector<int64_t> sizes{3, 40, 7};
  std::vector<float> a(3), b(40), c(7);
  const std::vector<void*> ptrs[1] = {{a.data(), b.data(), c.data()}};
  const auto launches = mt::plan(sizes, {.max_tensors = 2, .max_blocks = 3, .chunk_size = 16});
  // Launch 0: tensor 0 (1 chunk), tensor 1 (chunks 0, 1); launch 1: tensor 1 (chunk 2), tensor 2.
  ASSERT_EQ(launches.size(), 2u);
  mt::TensorListMeta<1> meta{};
  mt::fill_meta(launches[1], ptrs, sizes, meta);
  EXPECT_EQ(meta.ptr[0][0], b.data());
  EXPECT_EQ(meta.n[0], 40);
  EXPECT_EQ(meta.ptr[0][1], c.data());
  EXPECT_EQ(meta.block_tensor[0], 0);
  EXPECT_EQ(meta.block_chunk[0], 2);
  EXPECT_EQ(meta.block_tensor[1], 1);
  EXPECT_EQ(meta.block_chunk[1], 0);
}

}  // namespace
}  // namespace mantissa
