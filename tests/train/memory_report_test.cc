// --report=memory's measurements (train/memory_report.h): a step's parts of a small MLP against what its
// sizes say they must be, activations growing with the batch, and the batch-fit line.
#include "train/memory_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "amp/autocast.h"
#include "framework/error.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

TEST(MemoryReport, PartsOfAnMlpStepMatchItsSizes) {
  manual_seed(0);
  MLP model(64, {256}, 10);
  Adam adam(model.named_parameters(), {.lr = 1e-3});
  const uint64_t params = 4 * (64 * 256 + 256 + 256 * 10 + 10);
  auto parts_at = [&](int64_t batch) {
    const Tensor x = randn({batch, 64});
    const Tensor y = zeros({batch}, {.dtype = DType::kI64});
    return measure_step_memory("fp32", batch, model, adam, [&] { return cross_entropy(model.forward(x), y); });
  };
  const MemoryParts small = parts_at(32), large = parts_at(128);
  EXPECT_EQ(small.weights, params);  // nbytes: the tensors' own sizes
  EXPECT_EQ(small.gradients, params);
  EXPECT_EQ(small.working_copies, 0u);
  // Adam: exp_avg and exp_avg_sq per parameter, and an i64 step count each (4 tensors).
  EXPECT_EQ(small.optimizer_state, 2 * params + 4 * 8);
  EXPECT_GT(small.activations, 0u);
  // The hidden layer's activations (and the ReLU's) grow with the batch: 96 more examples of 256 floats,
  // kept at least twice (linear output, relu output).
  EXPECT_GE(large.activations, small.activations + 96 * 256 * 4);
  EXPECT_GT(large.peak, small.peak);
  EXPECT_GE(small.peak, small.at_rest + small.activations);

  adam.enable_working_copies(DType::kBF16);
  const MemoryParts copies = parts_at(32);
  EXPECT_EQ(copies.working_copies, params / 2);
}

// The precision ladder's bytes, measured (issue 36): bf16 weights and grads (2 B each), Kahan's bf16 compensation
// (2 B) and 8-bit moments (1 B each, one f32 absmax per 2048 values of each tensor) against 4 + 4 + 8 B of the
// fp32 rung.
TEST(MemoryReport, TheLaddersStepHoldsItsBytesPerParameter) {
  manual_seed(0);
  MLP model(64, {256}, 10);
  model.to(DType::kBF16);
  const PrecisionLadder ladder{.master_weights = MasterWeights::kNone,
                               .update_rounding = UpdateRounding::kKahan,
                               .optimizer_state = StateStorage::k8bit};
  Adam adam(model.named_parameters(), {.lr = 1e-3}, ladder);
  const uint64_t n = 64 * 256 + 256 + 256 * 10 + 10;
  const Tensor x = randn({32, 64});
  const Tensor y = zeros({32}, {.dtype = DType::kI64});
  const MemoryParts parts = measure_step_memory("bf16", 32, model, adam, [&] {
    amp::AutocastGuard guard({.dtype = DType::kBF16});
    return cross_entropy(model.forward(x), y);
  });
  EXPECT_EQ(parts.weights, 2 * n);
  EXPECT_EQ(parts.gradients, 2 * n);
  // Per tensor (4): 2 codes and 2 absmax of ceil(numel / 2048) floats, a compensation, a step count.
  uint64_t absmax = 0;
  for (uint64_t numel : {64 * 256, 256, 256 * 10, 10}) absmax += 2 * 4 * ((numel + 2047) / 2048);
  EXPECT_EQ(parts.optimizer_state, 2 * n + absmax + 2 * n + 4 * 8);
}

TEST(MemoryReport, BatchFitSolvesTheLineAndRefusesOneBatchSize) {
  MemoryParts a{.batch = 10, .peak = 1000 + 10 * 50}, b{.batch = 20, .peak = 1000 + 20 * 50};
  const BatchFit f = fit_batch(6000, a, b);
  EXPECT_DOUBLE_EQ(f.bytes_per_example, 50);
  EXPECT_DOUBLE_EQ(f.fixed_bytes, 1000);
  EXPECT_EQ(f.predicted, 100);
  EXPECT_EQ(fit_batch(500, a, b).predicted, 0);  // not even one example
  EXPECT_THROW(fit_batch(6000, a, a), Error);
  const std::string table = memory_table({a, b});
  EXPECT_THAT(table, testing::HasSubstr("activations kept for backward"));
}

// The line's prediction is checked by a step; when the real peak is over the budget (here: a size class that
// rounds the peak up beyond batch 80), the check steps down until a step fits.
TEST(MemoryReport, APredictionOverTheBudgetStepsDownUntilAStepFits) {
  std::vector<int64_t> ran;
  auto peak_at = [&](int64_t b) -> uint64_t {
    ran.push_back(b);
    return 1000 + 50 * static_cast<uint64_t>(b) + (b > 80 ? 2000 : 0);
  };
  const BatchFit f = find_batch_for_budget(6000, 10, 1000, peak_at);
  EXPECT_EQ(f.predicted, 100);
  EXPECT_EQ(f.checked, 72);  // 100 -> 90 -> 81 (over) -> 72
  EXPECT_EQ(f.stepped_down, 3);
  EXPECT_TRUE(f.fits());
  EXPECT_EQ(ran, (std::vector<int64_t>{10, 20, 100, 90, 81, 72}));
  EXPECT_THAT(f.summary(), testing::HasSubstr("went over it, and one at batch 72"));
  const BatchFit capped = find_batch_for_budget(6000, 10, 50, [](int64_t b) { return 1000 + 50 * uint64_t(b); });
  EXPECT_EQ(capped.checked, 50);
  EXPECT_THAT(capped.summary(), testing::HasSubstr("(the check's cap)"));
}

}  // namespace
}  // namespace mantissa
