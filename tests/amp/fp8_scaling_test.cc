// amp/fp8_scaling.h: the per-role update math, step by step against sequences computed by hand (history of 3,
// max and most_recent, margin 1, amax 0, inf and nan keeping the scale, the ring rolling over), the dynamic
// scale, the overflow counter and the newest-first history order of checkpoints.
#include "amp/fp8_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "framework/error.h"

namespace mantissa::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor f32(float v) { return scalar_tensor(v, {.dtype = DType::kF32}); }
Tensor i64(int64_t v) { return scalar_tensor(static_cast<double>(v), {.dtype = DType::kI64}); }

std::vector<float> values_of(const Tensor& t) {
  const Tensor c = t.to(DType::kF32).contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// One step: the amaxes of its casts (several for an accumulated step), then the end of the step.
struct Step {
  std::vector<float> amaxes;
  float scale_after;  // by hand: (448 / amax) / 2 with amax as the recipe picks it, or the previous scale
};

void run(Fp8TensorState& s, const std::vector<Step>& steps) {
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "step " << i);
    for (float a : steps[i].amaxes) fp8_record(s, f32(a), i64(0));
    fp8_end_step(s);
    EXPECT_EQ(s.scale.item<float>(), steps[i].scale_after);
    EXPECT_EQ(s.scale_inv.item<float>(), 1.0f / steps[i].scale_after);
  }
}

TEST(Fp8Scaling, FreshStateCastsWithScaleOne) {
  const Fp8TensorState s = Fp8TensorState::make({.history_len = 3}, DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
  EXPECT_EQ(s.history_len(), 3);
  EXPECT_EQ(values_of(s.amax_history), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(s.scale.item(), 1.0);
  EXPECT_EQ(s.scale_inv.item(), 1.0);
  EXPECT_EQ(s.overflow_count.dtype(), DType::kF64);
  EXPECT_EQ(s.overflow_count.item(), 0.0);
  // Dynamic scaling keeps one entry whatever history_len says.
  EXPECT_EQ(Fp8TensorState::make({.scaling = Fp8Scaling::kDynamic}, DType::kF8E5M2, Fp8Overflow::kSaturate, kCPU)
                .history_len(),
            1);
  EXPECT_THROW(Fp8TensorState::make({}, DType::kBF16, Fp8Overflow::kSaturate, kCPU), Error);
}

// History 3, max over it, margin 1, E4M3 (448). The ring after each step's casts is written beside it.
TEST(Fp8Scaling, DelayedMaxOverHistoryOfThree) {
  Fp8TensorState s = Fp8TensorState::make({.history_len = 3, .amax_compute = AmaxCompute::kMax, .margin = 1},
                                          DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
  run(s, {
             {{2.0f, 3.5f}, 64.0f},  // [3.5, 0, 0]: two micro-batches fold into one entry; 448 / 3.5 / 2
             {{7.0f}, 32.0f},        // [3.5, 7, 0]
             {{1.0f}, 32.0f},        // [3.5, 7, 1]
             {{0.5f}, 32.0f},        // [0.5, 7, 1]: the ring is back at entry 0, 3.5 dropped out
             {{0.0f}, 224.0f},       // [0.5, 0, 1]: 7 dropped out; 448 / 1 / 2
             {{kInf}, 224.0f},       // [0.5, 0, inf]: an inf amax keeps the scale
             {{0.0f}, 224.0f},       // [0, 0, inf]: still in the history
             {{0.0f}, 224.0f},       // [0, 0, inf]
             {{0.0f}, 224.0f},       // [0, 0, 0]: inf dropped out, an amax of 0 keeps the scale too
             {{14.0f}, 16.0f},       // [14, 0, 0]
         });
}

TEST(Fp8Scaling, DelayedMostRecent) {
  Fp8TensorState s = Fp8TensorState::make({.history_len = 3, .amax_compute = AmaxCompute::kMostRecent, .margin = 1},
                                          DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
  run(s, {
             {{2.0f, 3.5f}, 64.0f},
             {{7.0f}, 32.0f},
             {{1.0f}, 224.0f},  // only this step's amax counts
             {{0.5f}, 448.0f},
             {{0.0f}, 448.0f},  // 0 keeps it
             {{kInf}, 448.0f},  // inf keeps it
             {{0.0f}, 448.0f},
             {{14.0f}, 16.0f},
         });
}

TEST(Fp8Scaling, DelayedNanKeepsTheScaleAndStaysInTheHistory) {
  Fp8TensorState s = Fp8TensorState::make({.history_len = 2}, DType::kF8E5M2, Fp8Overflow::kSaturate, kCPU);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // E5M2, margin 0: 57344 / 4 = 14336. A nan folded into an entry beats any number folded before or after it.
  run(s, {{{4.0f}, 14336.0f}, {{1.0f, nan, 2.0f}, 14336.0f}, {{8.0f}, 14336.0f}, {{8.0f}, 7168.0f}});
}

TEST(Fp8Scaling, MarginAndNonPowerOfTwoScalesRoundInF32) {
  Fp8TensorState s =
      Fp8TensorState::make({.history_len = 1, .margin = 3}, DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
  fp8_record(s, f32(3.0f), i64(0));
  fp8_end_step(s);
  const float expected = (448.0f / 3.0f) / 8.0f;  // two f32 roundings, as TE on the GPU
  EXPECT_EQ(s.scale.item<float>(), expected);
  EXPECT_EQ(s.scale_inv.item<float>(), 1.0f / expected);
  EXPECT_EQ(s.amax.item<float>(), 3.0f);
  // History 1: the entry is cleared at every step, so the next step sees only its own amax.
  EXPECT_EQ(values_of(s.amax_history), (std::vector<float>{0.0f}));
}

TEST(Fp8Scaling, DelayedScaleFunction) {
  const Tensor prev = f32(5.0f);
  EXPECT_EQ(fp8_delayed_scale(f32(2.0f), prev, DType::kF8E5M2, 0).item<float>(), 28672.0f);
  EXPECT_EQ(fp8_delayed_scale(f32(2.0f), prev, DType::kF8E5M2, 2).item<float>(), 7168.0f);
  EXPECT_EQ(fp8_delayed_scale(f32(0.0f), prev, DType::kF8E4M3, 0).item<float>(), 5.0f);
  EXPECT_EQ(fp8_delayed_scale(f32(kInf), prev, DType::kF8E4M3, 0).item<float>(), 5.0f);
  EXPECT_EQ(fp8_delayed_scale(f32(-kInf), prev, DType::kF8E4M3, 0).item<float>(), 5.0f);
  EXPECT_EQ(fp8_delayed_scale(f32(std::nanf("")), prev, DType::kF8E4M3, 0).item<float>(), 5.0f);
  // A tiny amax gives a large, finite scale.
  EXPECT_EQ(fp8_delayed_scale(f32(1e-30f), prev, DType::kF8E4M3, 0).item<float>(), 448.0f / 1e-30f);
}

TEST(Fp8Scaling, DynamicScale) {
  EXPECT_EQ(fp8_dynamic_scale(f32(3.0f), DType::kF8E5M2, 0).item<float>(), 57344.0f / 3.0f);
  EXPECT_EQ(fp8_dynamic_scale(f32(3.0f), DType::kF8E4M3, 1).item<float>(), (448.0f / 3.0f) / 2.0f);
  // An all-zero tensor: amax clamped to 1e-12 (torchao's EPS), a finite scale.
  EXPECT_EQ(fp8_dynamic_scale(f32(0.0f), DType::kF8E4M3, 0).item<float>(), 448.0f / static_cast<float>(1e-12));
  EXPECT_EQ(fp8_reciprocal(f32(3.0f)).item<float>(), 1.0f / 3.0f);
}

TEST(Fp8Scaling, DynamicStateRecordsTheStepsLargestAmax) {
  Fp8TensorState s = Fp8TensorState::make({.scaling = Fp8Scaling::kDynamic, .history_len = 16}, DType::kF8E4M3,
                                          Fp8Overflow::kSaturate, kCPU);
  fp8_record(s, f32(3.0f), i64(2));
  fp8_record(s, f32(5.0f), i64(1));
  fp8_record(s, f32(4.0f), i64(0));
  fp8_end_step(s);
  EXPECT_EQ(s.amax.item<float>(), 5.0f);
  EXPECT_EQ(s.scale.item<float>(), 1.0f);  // dynamic: end of step leaves the (last cast's) scale alone
  EXPECT_EQ(values_of(s.amax_history), (std::vector<float>{0.0f}));
  EXPECT_EQ(s.overflow_count.item(), 3.0);
  fp8_record(s, f32(1.0f), i64(4));
  EXPECT_EQ(s.overflow_count.item(), 7.0);
}

TEST(Fp8Scaling, HistoryNewestFirstAndBack) {
  Fp8TensorState s = Fp8TensorState::make({.history_len = 3}, DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
  for (float a : {1.0f, 2.0f, 3.0f, 4.0f}) {
    fp8_record(s, f32(a), i64(0));
    fp8_end_step(s);
  }
  // Four steps on a ring of 3: the current entry (slot 1) is fresh, then 4, then 3; 1 and 2 have dropped out.
  EXPECT_EQ(s.slot, 1);
  EXPECT_EQ(values_of(s.amax_history), (std::vector<float>{4.0f, 0.0f, 3.0f}));
  EXPECT_EQ(values_of(fp8_history_newest_first(s)), (std::vector<float>{0.0f, 4.0f, 3.0f}));
  fp8_record(s, f32(0.5f), i64(0));
  EXPECT_EQ(values_of(fp8_history_newest_first(s)), (std::vector<float>{0.5f, 4.0f, 3.0f}));

  // Laid around another slot, the same newest-first history reads back the same, and steps on alike.
  Fp8TensorState t = Fp8TensorState::make({.history_len = 3}, DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
  t.slot = 2;
  fp8_set_history_newest_first(t, from_vector<float>({0.5f, 4.0f, 3.0f}));
  EXPECT_EQ(values_of(t.amax_history), (std::vector<float>{3.0f, 4.0f, 0.5f}));  // ring[2 - k] = entry k
  EXPECT_EQ(values_of(fp8_history_newest_first(t)), (std::vector<float>{0.5f, 4.0f, 3.0f}));
  t.scale = s.scale.clone();
  fp8_end_step(s);
  fp8_end_step(t);
  EXPECT_EQ(values_of(fp8_history_newest_first(t)), values_of(fp8_history_newest_first(s)));
  EXPECT_EQ(t.scale.item<float>(), s.scale.item<float>());
  EXPECT_THROW(fp8_set_history_newest_first(t, from_vector<float>({1.0f, 2.0f})), Error);
}

}  // namespace
}  // namespace mantissa::amp
