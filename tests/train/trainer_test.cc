// The Trainer: each precision trains, the loop's counting (epochs, max_steps, accumulation tails), the
// scaler's skips, clipping, evaluation, metrics, and an in-memory checkpoint that continues bit for bit.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/host_read.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/train/read_order_support.h"
#include "tests/train/trainer_rig.h"

namespace mantissa {
namespace {

using testing::flat_weights;
using testing::kClasses;
using testing::kFeatures;
using testing::Rig;
using testing::teacher_data;

class TrainerPrecisionTest : public ::testing::TestWithParam<Precision> {};

TEST_P(TrainerPrecisionTest, LearnsAndReportsEveryStep) {
  Rig s;
  Trainer trainer({.precision = GetParam(), .epochs = 8}, s.model, s.task(), s.adam, s.train, &s.test);
  std::vector<StepMetrics> steps;
  std::vector<EvalMetrics> evals;
  trainer.on_step_end([&](const StepMetrics& m) { steps.push_back(m); });
  trainer.on_eval_end([&](const EvalMetrics& m) { evals.push_back(m); });
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  ASSERT_TRUE(summary.ok()) << summary.status();

  ASSERT_EQ(steps.size(), 8u * 16u);  // 512 / 32 batches per epoch
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(steps[i].epoch, static_cast<int64_t>(i) / 16);
    EXPECT_TRUE(std::isfinite(steps[i].loss));
    EXPECT_DOUBLE_EQ(steps[i].lr, 1e-2);
    EXPECT_GT(steps[i].samples_per_s, 0.0);
  }
  // fp16 scales the loss (2^16 by default), the others do not.
  EXPECT_EQ(steps[0].scale, GetParam() == Precision::kF16 ? 65536.0 : 1.0);
  ASSERT_EQ(evals.size(), 8u);  // one per epoch end; the last step's evaluation is not repeated
  EXPECT_EQ(evals.back().step, 128);
  ASSERT_TRUE(summary->test_accuracy.has_value());
  EXPECT_EQ(*summary->test_accuracy, *evals.back().accuracy);
  EXPECT_EQ(summary->steps, 128);
  // The teacher's labels are learnable: chance is 25%.
  EXPECT_GT(*summary->test_accuracy, 0.6);
  EXPECT_LT(steps.back().loss, 0.5 * steps.front().loss);
  EXPECT_FALSE(summary->val_loss.has_value());
}

INSTANTIATE_TEST_SUITE_P(Precisions, TrainerPrecisionTest,
                         ::testing::Values(Precision::kF32, Precision::kF16, Precision::kBF16, Precision::kFp8),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

TEST(TrainerTest, MaxStepsStopsInsideAnEpoch) {
  Rig s;
  Trainer trainer({.precision = Precision::kF32, .epochs = 3, .max_steps = 7}, s.model, s.task(), s.adam, s.train);
  ASSERT_TRUE(trainer.fit().ok());
  EXPECT_EQ(trainer.step(), 7);
  EXPECT_EQ(s.train.position(), (LoaderPosition{.epoch = 0, .batch = 7}));
}

TEST(TrainerTest, AccumulationTakesTheEpochTailAsAShortStep) {
  Rig s({32}, 32, 320);  // 10 batches per epoch, 3 per step: steps of 3, 3, 3 and 1
  Trainer trainer({.precision = Precision::kF32, .epochs = 2, .grad_accum = 3}, s.model, s.task(), s.adam, s.train);
  EXPECT_EQ(trainer.steps_per_epoch(), 4);
  std::vector<StepMetrics> steps;
  trainer.on_step_end([&](const StepMetrics& m) { steps.push_back(m); });
  ASSERT_TRUE(trainer.fit().ok());
  ASSERT_EQ(steps.size(), 8u);
  EXPECT_EQ(steps[3].epoch, 0);
  EXPECT_EQ(steps[4].epoch, 1);
  EXPECT_EQ(s.train.position(), (LoaderPosition{.epoch = 2, .batch = 0}));
}

TEST(TrainerTest, AccumulatedMicroBatchesEqualOneBigBatch) {
  // Two micro-batches of 16 average to the gradient of one batch of 32 (no shuffle: the same 32 examples).
  auto run = [](int64_t batch, int64_t accum) {
    Generator gen(7);
    MLP model(kFeatures, {32}, kClasses, {.generator = &gen});
    SGD sgd(model.named_parameters(), {.lr = 0.5});
    DataLoader train(teacher_data(64, 1), {.batch_size = batch});
    Trainer trainer({.precision = Precision::kF32, .max_steps = 1, .grad_accum = accum}, model,
                    classification_task([&](const Tensor& x) { return model.forward(x); }), sgd, train);
    EXPECT_TRUE(trainer.fit().ok());
    return flat_weights(model);
  };
  const std::vector<float> big = run(32, 1), accumulated = run(16, 2);
  ASSERT_EQ(big.size(), accumulated.size());
  for (size_t i = 0; i < big.size(); ++i) {
    // The same sums in a different order: a few f32 ulps of the update.
    EXPECT_NEAR(big[i], accumulated[i], 1e-6) << "weight " << i;
  }
}

TEST(TrainerTest, Fp16SkipsOverflowingStepsAndBacksOff) {
  Rig s;
  const std::vector<float> before = flat_weights(s.model);
  // 2^40 times any loss of order 1 overflows f16's 65504 in the backward: the first steps are skipped.
  Trainer trainer({.precision = Precision::kF16,
                   .max_steps = 40,
                   .scaler = amp::GradScalerOptions{.init_scale = std::ldexp(1.0, 40)}},
                  s.model, s.task(), s.adam, s.train);
  std::vector<StepMetrics> steps;
  trainer.on_step_end([&](const StepMetrics& m) {
    steps.push_back(m);
    if (m.step == 1) {
      EXPECT_EQ(flat_weights(s.model), before) << "a skipped step changed the weights";
    }
  });
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  ASSERT_TRUE(summary.ok());
  ASSERT_TRUE(steps[0].skipped);
  EXPECT_FALSE(std::isfinite(steps[0].grad_norm));
  EXPECT_EQ(steps[1].scale, steps[0].scale / 2);  // one backoff per skipped step
  int64_t skipped = 0;
  for (const StepMetrics& m : steps) skipped += m.skipped ? 1 : 0;
  EXPECT_GT(skipped, 0);
  EXPECT_LT(skipped, 40);
  EXPECT_FALSE(steps.back().skipped);
  EXPECT_EQ(summary->skipped_steps, skipped);
  EXPECT_EQ(summary->final_scale, trainer.scaler().get_scale());
  EXPECT_NE(flat_weights(s.model), before);
}

TEST(TrainerTest, ClippingBoundsTheUpdate) {
  Generator gen(7);
  MLP model(kFeatures, {32}, kClasses, {.generator = &gen});
  SGD sgd(model.named_parameters(), {.lr = 1.0});
  DataLoader train(teacher_data(64, 1), {.batch_size = 64});
  const std::vector<float> before = flat_weights(model);
  Trainer trainer({.precision = Precision::kF32, .max_steps = 1, .clip_grad_norm = 1e-3}, model,
                  classification_task([&](const Tensor& x) { return model.forward(x); }), sgd, train);
  double reported = 0.0;
  trainer.on_step_end([&](const StepMetrics& m) { reported = m.grad_norm; });
  ASSERT_TRUE(trainer.fit().ok());
  EXPECT_GT(reported, 1e-3);  // the norm before clipping is reported
  const std::vector<float> after = flat_weights(model);
  double moved = 0.0;
  for (size_t i = 0; i < before.size(); ++i) moved += (after[i] - before[i]) * double(after[i] - before[i]);
  // SGD with lr 1 moves the weights by the clipped gradient: norm 1e-3 (f32 rounding aside).
  EXPECT_NEAR(std::sqrt(moved), 1e-3, 1e-6);
}

TEST(TrainerTest, EvaluateCountsCorrectPredictions) {
  // The "model" returns its input as logits: rows favour classes 0, 1, 2, 2 against labels 0, 1, 2, 3.
  const Tensor logits = from_vector<float>({5, 0, 0, 0, 0, 5, 0, 0, 0, 0, 5, 0, 0, 0, 5, 0}, {4, 4});
  const Tensor labels = from_vector<int64_t>({0, 1, 2, 3}, {4});
  auto data = std::make_shared<TensorDataset>(std::vector<Tensor>{logits, labels});
  Generator gen(1);
  MLP unused(4, {}, 4, {.generator = &gen});
  SGD sgd(unused.named_parameters(), {.lr = 0.1});
  DataLoader train(data, {.batch_size = 4}), test(data, {.batch_size = 3});
  Trainer trainer({.precision = Precision::kF32, .max_steps = 1}, unused,
                  classification_task([](const Tensor& x) { return x * 1.0; }), sgd, train, &test);
  const EvalMetrics m = trainer.evaluate();
  ASSERT_TRUE(m.accuracy.has_value());
  EXPECT_DOUBLE_EQ(*m.accuracy, 0.75);
  // Three rows have p(label) = e^5 / (e^5 + 3); the last has p(label) = 1 / (e^5 + 3).
  const double good = -std::log(std::exp(5.0) / (std::exp(5.0) + 3)), bad = -std::log(1 / (std::exp(5.0) + 3));
  EXPECT_NEAR(m.loss, (3 * good + bad) / 4, 1e-6);
}

TEST(TrainerTest, MetricsFileHasOneLinePerStepEvaluationAndTheSummary) {
  Rig s;
  const std::string path = ::testing::TempDir() + "/trainer_metrics.jsonl";
  Trainer trainer({.precision = Precision::kBF16, .max_steps = 20, .eval_every = 8, .metrics_path = path}, s.model,
                  s.task(), s.adam, s.train, &s.test);
  ASSERT_TRUE(trainer.fit().ok());
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 20u + 3u + 1u);  // evaluations at steps 8, 16 and 20 (the end)
  EXPECT_EQ(lines[0].rfind("{\"step\": 1, \"epoch\": 0, \"loss\": ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[8].rfind("{\"event\": \"eval\", \"step\": 8,", 0), 0u) << lines[8];
  EXPECT_EQ(lines.back().rfind("{\"event\": \"summary\", \"steps\": 20, \"skipped_steps\": 0,", 0), 0u) << lines.back();
}

TEST(TrainerTest, MetricsFileInAMissingFolderIsAnError) {
  Rig s;
  Trainer trainer({.precision = Precision::kF32, .max_steps = 1, .metrics_path = "/nonexistent-dir/m.jsonl"}, s.model,
                  s.task(), s.adam, s.train);
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("/nonexistent-dir/m.jsonl"), std::string::npos) << summary.status();
  EXPECT_EQ(trainer.step(), 0);
}

TEST(TrainerTest, BadConfigurationIsRefusedWithTheReason) {
  Rig s;
  auto message = [&](TrainerConfig c) {
    try {
      Trainer t(c, s.model, s.task(), s.adam, s.train);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.epochs = 0, .max_steps = 0}).find("neither epochs nor max_steps"), std::string::npos);
  EXPECT_NE(message({.max_steps = 1, .grad_accum = 0}).find("grad_accum must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(message({.max_steps = 1, .clip_grad_norm = -1}).find("clip_grad_norm"), std::string::npos);
  EXPECT_NE(message({.max_steps = 1, .keep_checkpoints = 0}).find("keep_checkpoints"), std::string::npos);
  EXPECT_NE(message({.max_steps = 1, .step_read_lag = -2}).find("step_read_lag must be >= 0, or -1"),
            std::string::npos);
  EXPECT_NE(message({.max_steps = 1, .zero_stage = 2}).find("zero_stage must be 0 (plain data parallelism) or 1"),
            std::string::npos);
}

// An uninterrupted run against one stopped at step `stop` (inside an epoch) and continued by a new
// Trainer (new model, optimizer and loader, initialised differently) from the checkpoint: every later loss
// and the final weights are the same bits.
class TrainerResumeTest : public ::testing::TestWithParam<Precision> {};

TEST_P(TrainerResumeTest, ContinuesBitForBitFromAnInMemoryCheckpoint) {
  constexpr int64_t kSteps = 30, kStop = 13;  // 16 batches per epoch: the stop is inside epoch 0
  auto config = [](int64_t max_steps) {
    return TrainerConfig{
        .precision = GetParam(),
        .max_steps = max_steps,
        .schedule = cosine({.total_steps = kSteps}),
        // a scale that overflows at first: the resumed run must carry the scaler's state
        .scaler = GetParam() == Precision::kF16
                      ? std::optional(amp::GradScalerOptions{.init_scale = std::ldexp(1.0, 24), .growth_interval = 4})
                      : std::nullopt};
  };
  std::vector<double> full_losses;
  std::vector<float> full_weights;
  {
    Rig s;
    Trainer trainer(config(kSteps), s.model, s.task(), s.adam, s.train);
    trainer.on_step_end([&](const StepMetrics& m) { full_losses.push_back(m.loss); });
    ASSERT_TRUE(trainer.fit().ok());
    full_weights = flat_weights(s.model);
  }
  Checkpoint saved;
  {
    Rig s;
    Trainer trainer(config(kStop), s.model, s.task(), s.adam, s.train);
    ASSERT_TRUE(trainer.fit().ok());
    saved = trainer.checkpoint();
    EXPECT_EQ(saved.trainer.step, kStop);
    EXPECT_EQ(saved.trainer.batch, kStop);
  }
  Rig s({32}, 32, 512, /*init_seed=*/1234);
  Trainer trainer(config(kSteps), s.model, s.task(), s.adam, s.train);
  ASSERT_TRUE(trainer.restore(saved).ok());
  std::vector<double> resumed_losses;
  trainer.on_step_end([&](const StepMetrics& m) { resumed_losses.push_back(m.loss); });
  ASSERT_TRUE(trainer.fit().ok());
  ASSERT_EQ(resumed_losses.size(), static_cast<size_t>(kSteps - kStop));
  for (int64_t i = 0; i < kSteps - kStop; ++i) {
    EXPECT_EQ(resumed_losses[i], full_losses[kStop + i]) << "step " << kStop + i + 1;
  }
  EXPECT_EQ(flat_weights(s.model), full_weights);
}

INSTANTIATE_TEST_SUITE_P(Precisions, TrainerResumeTest,
                         ::testing::Values(Precision::kF32, Precision::kF16, Precision::kBF16, Precision::kFp8),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

// request_stop from another thread (here: the step callback, as a signal handler or a watchdog thread
// would) ends fit() after the step in progress with a checkpoint and a "stopped" line; resume() continues the
// run bit for bit, the metrics file appended to, and the summary counts the whole run.
class TrainerStopTest : public ::testing::TestWithParam<Precision> {
 protected:
  std::string dir_ =
      ::testing::TempDir() + "/trainer_stop_" + precision_name(GetParam()) + "." + std::to_string(::getpid());
  void SetUp() override {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  TrainerConfig config(const std::string& name) const {
    return {.precision = GetParam(),
            .max_steps = 30,
            .eval_every = 10,
            .checkpoint_dir = dir_ + "/" + name,
            .checkpoint_every = 4,
            .metrics_path = dir_ + "/" + name + ".jsonl"};
  }
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A metrics line without its timing fields, which differ from run to run.
std::string without_timing(std::string line) {
  for (const std::string key : {", \"samples_per_s\": ", ", \"wall_s\": "}) {
    const size_t at = line.find(key);
    if (at != std::string::npos) line.erase(at, line.find_first_of(",}", at + key.size()) - at);
  }
  return line;
}

TEST_P(TrainerStopTest, StopsAfterTheStepWithACheckpointAndResumesExactly) {
  constexpr int64_t kStopAt = 13;  // between checkpoints (every 4) and evaluations (every 10)
  std::vector<float> full_weights;
  {
    Rig s;
    Trainer trainer(config("full"), s.model, s.task(), s.adam, s.train, &s.test);
    ASSERT_TRUE(trainer.fit().ok());
    full_weights = flat_weights(s.model);
  }
  double stopped_wall_s = 0;
  {
    Rig s;
    Trainer trainer(config("part"), s.model, s.task(), s.adam, s.train, &s.test);
    int64_t evaluations = 0;
    trainer.on_eval_end([&](const EvalMetrics&) { ++evaluations; });
    std::thread asker;
    trainer.on_step_end([&](const StepMetrics& m) {
      if (m.step == kStopAt) {
        asker = std::thread([&] { trainer.request_stop(SIGTERM); });
        asker.join();
      }
    });
    const absl::StatusOr<RunSummary> summary = trainer.fit();
    ASSERT_TRUE(summary.ok()) << summary.status();
    ASSERT_TRUE(summary->stopped.has_value());
    // Single process: the request is read at the next step's end, after the callback of step kStopAt.
    const int64_t stop = kStopAt + 1;
    EXPECT_EQ(summary->stopped->step, stop);
    EXPECT_EQ(trainer.step(), stop);
    EXPECT_EQ(summary->steps, stop);
    EXPECT_EQ(summary->stopped->signal, SIGTERM);
    EXPECT_EQ(summary->stopped->checkpoint, dir_ + "/part/step_" + std::to_string(stop) + ".h5");
    EXPECT_TRUE(std::filesystem::exists(summary->stopped->checkpoint));
    EXPECT_EQ(evaluations, 1);  // at step 10; none at the stop
    const std::vector<std::string> lines = lines_of(dir_ + "/part.jsonl");
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back(), to_json(*summary->stopped));
    stopped_wall_s = summary->wall_s;
  }
  Rig s({32}, 32, 512, /*init_seed=*/1234);
  Trainer trainer(config("part"), s.model, s.task(), s.adam, s.train, &s.test);
  ASSERT_TRUE(trainer.resume("latest").ok());
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->stopped.has_value());
  EXPECT_EQ(summary->steps, 30);
  EXPECT_GE(summary->wall_s, stopped_wall_s);  // the whole run's, the part before the stop included
  EXPECT_EQ(flat_weights(s.model), full_weights);
  // The metrics file reads as the unbroken run's, with the stop and the resume marked.
  std::vector<std::string> full, part;
  for (const std::string& line : lines_of(dir_ + "/full.jsonl")) full.push_back(without_timing(line));
  for (const std::string& line : lines_of(dir_ + "/part.jsonl")) {
    if (line.find("\"event\": \"stopped\"") == std::string::npos &&
        line.find("\"event\": \"resumed\"") == std::string::npos) {
      part.push_back(without_timing(line));
    }
  }
  EXPECT_EQ(part, full);
}

TEST_P(TrainerStopTest, ARequestBeforeFitStopsAfterTheFirstStep) {
  Rig s;
  StopRequest stop;
  stop.request();  // e.g. a signal during the program's start-up
  TrainerConfig c = config("early");
  c.stop = &stop;
  Trainer trainer(c, s.model, s.task(), s.adam, s.train, &s.test);
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_TRUE(summary->stopped.has_value());
  EXPECT_EQ(summary->stopped->step, 1);
  EXPECT_EQ(summary->stopped->signal, 0);
  EXPECT_EQ(lines_of(dir_ + "/early.jsonl").back(),
            R"({"event": "stopped", "step": 1, "signal": null, "checkpoint": "step_1.h5"})");
  // Cleared, the same Trainer goes on to the end, its metrics file appended to.
  stop.clear();
  const absl::StatusOr<RunSummary> rest = trainer.fit();
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_FALSE(rest->stopped.has_value());
  EXPECT_EQ(rest->steps, 30);
  const std::vector<std::string> lines = lines_of(dir_ + "/early.jsonl");
  EXPECT_EQ(lines[0].rfind(R"({"step": 1,)", 0), 0u) << lines[0];
  EXPECT_EQ(lines[2], R"({"event": "resumed", "step": 1})");
  EXPECT_EQ(lines[3].rfind(R"({"step": 2,)", 0), 0u) << lines[3];
}

TEST_P(TrainerStopTest, AStopOnTheLastStepFinishesNormally) {
  Rig s;
  TrainerConfig c = config("last");
  Trainer trainer(c, s.model, s.task(), s.adam, s.train, &s.test);
  trainer.on_step_end([&](const StepMetrics& m) {
    if (m.step == c.max_steps - 1) trainer.request_stop();
  });
  const absl::StatusOr<RunSummary> summary = trainer.fit();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(summary->stopped.has_value());  // the step it stopped after was the run's last
  EXPECT_EQ(summary->steps, c.max_steps);
  EXPECT_EQ(lines_of(c.metrics_path).back().rfind(R"({"event": "summary")", 0), 0u);
}

INSTANTIATE_TEST_SUITE_P(Precisions, TrainerStopTest,
                         ::testing::Values(Precision::kF32, Precision::kF16, Precision::kBF16, Precision::kFp8),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

TEST(TrainerTest, RestoreRefusesAnotherModelAndChangesNothing) {
  Rig a({32});
  Trainer ta({.precision = Precision::kF32, .max_steps = 2}, a.model, a.task(), a.adam, a.train);
  ASSERT_TRUE(ta.fit().ok());
  const Checkpoint c = ta.checkpoint();

  Rig b({48});
  Trainer tb({.precision = Precision::kF32, .max_steps = 2}, b.model, b.task(), b.adam, b.train);
  const std::vector<float> before = flat_weights(b.model);
  const absl::Status status = tb.restore(c, "run/step_2.h5");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("run/step_2.h5"), std::string::npos) << status;
  EXPECT_EQ(flat_weights(b.model), before);
  EXPECT_EQ(tb.step(), 0);
}

TEST(TrainerTest, RestoreRefusesAnotherPrecision) {
  Rig a;
  Trainer ta({.precision = Precision::kF16, .max_steps = 1}, a.model, a.task(), a.adam, a.train);
  ASSERT_TRUE(ta.fit().ok());
  Rig b;
  Trainer tb({.precision = Precision::kBF16, .max_steps = 1}, b.model, b.task(), b.adam, b.train);
  const absl::Status status = tb.restore(ta.checkpoint(), "x.h5");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("written by a run in fp16; this run is in bf16"), std::string::npos) << status;
}

// TrainerConfig::step_read_lag: a step's values are read `lag` steps after it is enqueued (on a GPU the host
// then never waits inside a step; tests/cuda/host_read_cuda_test.cc counts that on a device). Here, on the
// CPU: the same numbers as reading at once, the reads where they belong, and stops that still stop.
class TrainerReadLagTest : public ::testing::TestWithParam<Precision> {};

TEST_P(TrainerReadLagTest, LaggedReadsReportWhatImmediateReadsDo) {
  auto run = [](int64_t lag) {
    Rig s({32}, 32, 320);  // 10 batches per epoch, 3 per step: steps of 3, 3, 3 and 1
    TrainerConfig c{.precision = GetParam(),
                    .epochs = 3,
                    .grad_accum = 3,
                    .clip_grad_norm = 0.5,
                    .eval_every = 5,
                    .step_read_lag = lag};
    // fp16 from a scale that overflows: the first steps are skipped and back off, as the log must show.
    if (GetParam() == Precision::kF16) c.scaler = amp::GradScalerOptions{.init_scale = std::ldexp(1.0, 40)};
    Trainer trainer(c, s.model, s.task(), s.adam, s.train, &s.test);
    std::vector<std::string> log;
    trainer.on_step_end([&](const StepMetrics& m) { log.push_back(without_timing(to_json(m))); });
    trainer.on_eval_end([&](const EvalMetrics& m) { log.push_back(to_json(m)); });
    const absl::StatusOr<RunSummary> summary = trainer.fit();
    EXPECT_TRUE(summary.ok()) << summary.status();
    log.push_back(without_timing(to_json(*summary)));
    return std::make_pair(log, flat_weights(s.model));
  };
  const auto [now_log, now_weights] = run(0);
  ASSERT_EQ(now_log.size(), 12u + 3u + 1u);  // 12 steps, evaluations at 5, 10 and the end, the summary
  if (GetParam() == Precision::kF16) {
    EXPECT_NE(now_log[0].find("\"skipped\": true"), std::string::npos) << now_log[0];
  }
  for (const int64_t lag : {1, 3}) {
    const auto [log, weights] = run(lag);
    EXPECT_EQ(log, now_log) << "step_read_lag " << lag;
    EXPECT_EQ(weights, now_weights) << "step_read_lag " << lag;
  }
}

// The order of what the host does, with lag 1: "L" a step's loss is computed (one micro-batch per step: the
// n-th "L" starts step n), "W" a step's values are read (HostCopy::wait), "S<n>" step n is emitted, and
// any other host read by its name. The CPU kernels' item() calls on their own memory (the loss's backward
// reads its incoming gradient, the CPU scaler's rule its flags) wait for nothing and are left out here;
// tests/cuda/host_read_cuda_test.cc counts every host read of the same step on a GPU.
TEST(TrainerReadOrderTest, StepNIsReadOnlyAfterStepNPlusOneIsEnqueued) {
  constexpr int64_t kSteps = 6;
  for (const Precision precision : {Precision::kBF16, Precision::kF16}) {
    Rig s;
    ReadOrderLog log;
    Trainer trainer({.precision = precision, .max_steps = kSteps, .clip_grad_norm = 1.0, .step_read_lag = 1}, s.model,
                    log.logging_loss(s.task()), s.adam, s.train);
    log.log_steps(trainer);
    absl::StatusOr<RunSummary> summary;
    {
      const ScopedHostReadObserver observe = log.observe_reads();
      summary = trainer.fit();
    }
    ASSERT_TRUE(summary.ok()) << summary.status();
    const std::vector<std::string> expected = ReadOrderLog::expected_with_lag_one(kSteps);
    std::vector<std::string> steps;  // from the first loss to the last step emitted
    bool inside = false;
    for (const std::string& e : log.events) {
      inside = inside || e == "L";
      if (!inside) continue;
      if (e == "item") continue;
      steps.push_back(e);
      if (e == "S" + std::to_string(kSteps)) break;
    }
    EXPECT_EQ(steps, expected) << precision_name(precision);
  }
}

TEST(TrainerReadOrderTest, AStopRequestEndsTheRunLagStepsLater) {
  for (const int64_t lag : {0, 1, 2}) {
    Rig s;
    Trainer trainer({.precision = Precision::kF32, .max_steps = 30, .step_read_lag = lag}, s.model, s.task(), s.adam,
                    s.train);
    std::vector<int64_t> emitted;
    trainer.on_step_end([&](const StepMetrics& m) {
      emitted.push_back(m.step);
      if (m.step <= 5) {
        EXPECT_EQ(trainer.step(), m.step + lag) << "the host runs lag steps ahead";
      }
      if (m.step == 5) trainer.request_stop();
    });
    const absl::StatusOr<RunSummary> summary = trainer.fit();
    ASSERT_TRUE(summary.ok()) << summary.status();
    ASSERT_TRUE(summary->stopped.has_value()) << "lag " << lag;
    EXPECT_EQ(summary->stopped->step, 5 + 1 + lag) << "lag " << lag;
    // Every step taken is emitted, in order, the ones in flight at the stop included.
    std::vector<int64_t> all;
    for (int64_t n = 1; n <= 6 + lag; ++n) all.push_back(n);
    EXPECT_EQ(emitted, all) << "lag " << lag;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, TrainerReadLagTest,
                         ::testing::Values(Precision::kF32, Precision::kF16, Precision::kBF16, Precision::kFp8),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace mantissa
