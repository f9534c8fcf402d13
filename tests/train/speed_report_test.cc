// --report=speed's analysis (train/speed_report.h) on profiles made by hand, where every bucket's time is
// known: which bucket an event's self time goes to, the unrecorded time, GEMM FLOP rates, GEMM shapes that
// are not multiples of 8, the verdict's sentences, the JSON and the picture.
#include "train/speed_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "framework/error.h"

namespace mantissa {
namespace {

using profiler::Category;
using profiler::Event;
using testing::HasSubstr;

Event ev(std::string name, Category c, int64_t start_ms, int64_t end_ms, uint32_t depth, double flops = 0,
         std::string dims = "") {
  Event e;
  e.name = std::move(name);
  e.category = c;
  e.start_ns = start_ms * 1'000'000;
  e.end_ns = end_ms * 1'000'000;
  e.depth = depth;
  e.flops = flops;
  e.input_dims = std::move(dims);
  return e;
}

// One step of 100 ms: data 5, forward 40 (matmul 20, gelu 10, a cast 6 holding its copy_ 5), backward 30
// (a node of 30 holding a matmul of 20), unscale 5, optimizer 15 (Adam's kernel 12 inside the step), and 5 ms
// outside any event.
profiler::Profile one_step(double matmul_flops) {
  std::vector<Event> events = {
      ev("data", Category::kPhase, 0, 5, 0),
      ev("forward", Category::kPhase, 5, 45, 0),
      ev("matmul", Category::kOp, 5, 25, 1, matmul_flops, "[[1,30,64],[1,64,10]]"),
      ev("gelu", Category::kOp, 25, 35, 1),
      ev("to", Category::kOp, 35, 41, 1),
      ev("copy_", Category::kOp, 36, 41, 2),
      ev("backward", Category::kPhase, 45, 75, 0),
      ev("LinearBackward", Category::kBackward, 45, 75, 1),
      ev("matmul", Category::kOp, 50, 70, 2, matmul_flops, "[[1,64,32],[1,32,16]]"),
      ev("unscale", Category::kPhase, 75, 80, 0),
      ev("GradScaler.unscale_", Category::kOp, 75, 80, 1),
      ev("optimizer", Category::kPhase, 80, 95, 0),
      ev("Optimizer.step#Adam.step", Category::kOp, 81, 94, 1),
      ev("Adam.step", Category::kOp, 81, 93, 2),
  };
  return profiler::Profile(std::move(events), {}, 100'000'000, 0, 0);
}

double ms(const StepProfile& r, TimeBucket b) { return r.bucket_ms[static_cast<int>(b)]; }

TEST(SpeedReport, EachEventsSelfTimeGoesToOneBucket) {
  const StepProfile r = summarize_steps(one_step(2e9), "fp32", 1, 32);
  EXPECT_DOUBLE_EQ(r.step_ms, 100);
  EXPECT_NEAR(ms(r, TimeBucket::kLoader), 5, 1e-9);
  EXPECT_NEAR(ms(r, TimeBucket::kGemm), 40, 1e-9);
  // gelu's 10 ms and the backward node's own 10 ms (the kernels a node runs inline).
  EXPECT_NEAR(ms(r, TimeBucket::kElementwise), 20, 1e-9);
  EXPECT_NEAR(ms(r, TimeBucket::kCast), 6, 1e-9) << "the cast's copy_ is the cast's";
  EXPECT_NEAR(ms(r, TimeBucket::kScaler), 5, 1e-9);
  EXPECT_NEAR(ms(r, TimeBucket::kOptimizer), 15, 1e-9) << "Adam's kernel inside the step is the optimizer's";
  // forward's own 4 ms, and the 5 ms outside any event.
  EXPECT_NEAR(ms(r, TimeBucket::kOther), 9, 1e-9);
  double sum = 0;
  for (double b : r.bucket_ms) sum += b;
  EXPECT_NEAR(sum, r.step_ms, 1e-9);
  EXPECT_DOUBLE_EQ(r.samples_per_s(), 320);
  EXPECT_NEAR(r.gemm_gflops_per_s(), 4e9 / 40e6, 1e-9);  // 4 GFLOP in 40 ms
  ASSERT_EQ(r.misaligned.size(), 1u);                    // [30 x 64] @ [64 x 10]; the other GEMM is all multiples of 8
  EXPECT_EQ(r.misaligned[0].m, 30);
  EXPECT_EQ(r.misaligned[0].n, 10);
  EXPECT_EQ(r.misaligned[0].k, 64);
  EXPECT_NEAR(r.misaligned[0].ms_per_step, 20, 1e-9);
  // For FP8, 16: [64 x 32] @ [32 x 16] passes, [30 x 64] @ [64 x 10] does not.
  EXPECT_EQ(r.gemm_shapes_not_multiple_of_16, 1);
}

TEST(SpeedReport, FusedAttentionCountsWithTheGemms) {
  // The fused attention's forward op and its backward node's op carry FLOPs, and are GEMM work.
  std::vector<Event> events = {
      ev("forward", Category::kPhase, 0, 40, 0),
      ev("scaled_dot_product_attention", Category::kOp, 0, 10, 1, 1e9),
      ev("backward", Category::kPhase, 40, 100, 0),
      ev("ScaledDotProductAttentionBackward", Category::kBackward, 40, 70, 1),
      ev("ScaledDotProductAttentionBackward", Category::kOp, 41, 69, 2, 2e9),
  };
  const StepProfile r = summarize_steps(profiler::Profile(std::move(events), {}, 100'000'000, 0, 0), "fp32", 1, 8);
  // The forward op's 10 ms and the backward op's 28 ms (the node's own 2 ms around it are a node's inline
  // work, as for every node).
  EXPECT_NEAR(ms(r, TimeBucket::kGemm), 38, 1e-9);
  EXPECT_NEAR(r.gemm_gflops_per_s(), 3e9 / 38e6, 1e-9);
}

TEST(SpeedReport, TwoStepsHalveTheTimesPerStep) {
  const StepProfile r = summarize_steps(one_step(1e9), "bf16", 2, 32);
  EXPECT_DOUBLE_EQ(r.step_ms, 50);
  EXPECT_NEAR(ms(r, TimeBucket::kGemm), 20, 1e-9);
  EXPECT_THROW(summarize_steps(one_step(1e9), "bf16", 0, 32), Error);
}

TEST(SpeedReport, VerdictSaysWhereTheTimeWentAndWhyBf16CannotWinHere) {
  const StepProfile fp32 = summarize_steps(one_step(2e9), "fp32", 1, 32);
  StepProfile bf16 = summarize_steps(one_step(0.5e9), "bf16", 1, 32);
  bf16.step_ms = 200;  // slower, and its GEMMs at a quarter of fp32's rate
  const std::string v = speed_verdict({fp32, bf16}, /*cpu_has_bf16=*/false, /*cpu_has_fp16=*/false);
  EXPECT_THAT(v, HasSubstr("fp32: GEMMs, attention and convolutions are 40% of the step"));
  EXPECT_THAT(v, HasSubstr("bf16 is 0.50x fp32 (slower)"));
  EXPECT_THAT(v, HasSubstr("no AVX512_BF16 dot products"));
  EXPECT_THAT(v, HasSubstr("not a multiple of 8"));
  const std::string with = speed_verdict({fp32, bf16}, true, true);
  EXPECT_THAT(with, testing::Not(HasSubstr("AVX512_BF16")));
  const std::string table = speed_table({fp32, bf16});
  EXPECT_THAT(table, HasSubstr("GEMM, attention, convolution"));
  EXPECT_THAT(table, HasSubstr("0.50x"));
  const nlohmann::json j = nlohmann::json::parse(speed_json({fp32, bf16}, "mlp", v));
  EXPECT_EQ(j["precisions"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["precisions"][0]["step_ms"], 100);
  EXPECT_EQ(j["precisions"][0]["misaligned_gemms"][0]["m"], 30);
}

TEST(SpeedReport, PictureIsWrittenWholeOrNotAtAll) {
  namespace fs = std::filesystem;
  const StepProfile fp32 = summarize_steps(one_step(2e9), "fp32", 1, 32);
  const fs::path png = fs::temp_directory_path() / ("speed_report_test_" + std::to_string(::getpid()) + ".png");
  plot_speed({fp32, fp32}, "test", png.string());
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 1000u);
  fs::remove(png);
  try {
    plot_speed({fp32}, "test", "/nonexistent_dir_for_mantissa/x.png");
    FAIL() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent_dir_for_mantissa/x.png"));
  }
}

}  // namespace
}  // namespace mantissa
