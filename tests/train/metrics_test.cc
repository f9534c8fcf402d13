// MetricsWriter and to_json: the exact JSON lines, float32 round trips through the text, null for
// non-finite numbers, the errors of a file that cannot be created or written, and a resumed run's file
// (the lines up to the checkpoint kept, the rest dropped, appended to).
#include "train/metrics.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <unistd.h>

namespace mantissa {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text after `"key": ` up to the next ',' or '}'.
std::string value_of(const std::string& json, const std::string& key) {
  const std::string tag = "\"" + key + "\": ";
  const size_t at = json.find(tag);
  if (at == std::string::npos) return "<missing>";
  const size_t begin = at + tag.size();
  return json.substr(begin, json.find_first_of(",}", begin) - begin);
}

TEST(MetricsJson, StepLineExact) {
  const StepMetrics m{.step = 1,
                      .epoch = 0,
                      .loss = static_cast<double>(2.30258512f),
                      .lr = 0.001,
                      .scale = 65536,
                      .skipped = false,
                      .grad_norm = 1.5,
                      .samples_per_s = 4512.25};
  EXPECT_EQ(to_json(m),
            "{\"step\": 1, \"epoch\": 0, \"loss\": 2.30258512, \"lr\": 0.001, \"scale\": 65536, "
            "\"skipped\": false, \"grad_norm\": 1.5, \"samples_per_s\": 4512.25}");
}

TEST(MetricsJson, SkippedStepWritesNullForNonFiniteNumbers) {
  const StepMetrics m{.step = 12,
                      .epoch = 3,
                      .loss = kNaN,
                      .lr = 0.5,
                      .scale = 32768,
                      .skipped = true,
                      .grad_norm = kInf,
                      .samples_per_s = -kInf};
  EXPECT_EQ(to_json(m),
            "{\"step\": 12, \"epoch\": 3, \"loss\": null, \"lr\": 0.5, \"scale\": 32768, "
            "\"skipped\": true, \"grad_norm\": null, \"samples_per_s\": null}");
}

TEST(MetricsJson, EvalLineWithAndWithoutAccuracy) {
  EXPECT_EQ(to_json(EvalMetrics{.step = 469, .epoch = 0, .loss = 0.45, .accuracy = 0.8412}),
            "{\"event\": \"eval\", \"step\": 469, \"epoch\": 0, \"loss\": 0.45, \"accuracy\": 0.8412}");
  EXPECT_EQ(to_json(EvalMetrics{.step = 2000, .epoch = 4, .loss = 1.25}),
            "{\"event\": \"eval\", \"step\": 2000, \"epoch\": 4, \"loss\": 1.25}");
}

TEST(MetricsJson, SummaryLineClassifierAndLanguageModel) {
  EXPECT_EQ(to_json(RunSummary{.steps = 2345,
                               .skipped_steps = 3,
                               .final_scale = 32768,
                               .test_accuracy = 0.8775,
                               .samples_per_s = 21000.5,
                               .wall_s = 61.25}),
            "{\"event\": \"summary\", \"steps\": 2345, \"skipped_steps\": 3, \"final_scale\": 32768, "
            "\"test_accuracy\": 0.8775, \"samples_per_s\": 21000.5, \"wall_s\": 61.25}");
  EXPECT_EQ(
      to_json(RunSummary{
          .steps = 2000, .skipped_steps = 0, .final_scale = 1, .val_loss = 1.5, .samples_per_s = 800, .wall_s = 120}),
      "{\"event\": \"summary\", \"steps\": 2000, \"skipped_steps\": 0, \"final_scale\": 1, "
      "\"val_loss\": 1.5, \"samples_per_s\": 800, \"wall_s\": 120}");
}

TEST(MetricsJson, StopAndTheStepOfEachLine) {
  EXPECT_EQ(to_json(StopEvent{.step = 285, .signal = SIGTERM, .checkpoint = "runs/a/step_285.h5"}),
            R"({"event": "stopped", "step": 285, "signal": "SIGTERM", "checkpoint": "step_285.h5"})");
  EXPECT_EQ(to_json(StopEvent{.step = 3}), R"({"event": "stopped", "step": 3, "signal": null, "checkpoint": null})");
  EXPECT_EQ(metrics_line_step(to_json(StepMetrics{.step = 12})), 12);
  EXPECT_EQ(metrics_line_step(to_json(EvalMetrics{.step = 469, .loss = 1})), 469);
  EXPECT_EQ(metrics_line_step(to_json(StopEvent{.step = 285})), 285);
  EXPECT_EQ(metrics_line_step(to_json(RunSummary{.steps = 20})), std::nullopt);  // "steps" is not "step"
  const std::string cut = to_json(StepMetrics{.step = 7}).substr(0, 20);         // a crash in the middle
  EXPECT_EQ(metrics_line_step(cut), std::nullopt) << cut;
  EXPECT_EQ(metrics_line_step(R"({"step": 1x})"), std::nullopt);
  EXPECT_EQ(metrics_line_step(""), std::nullopt);
}

TEST(MetricsJson, LargeIntegersStayIntegers) {
  const StepMetrics m{.step = int64_t{1} << 40, .epoch = 123456789012};
  EXPECT_EQ(value_of(to_json(m), "step"), "1099511627776");
  EXPECT_EQ(value_of(to_json(m), "epoch"), "123456789012");
}

// Every float32 the trainer reports (loss, lr, scale, grad norm) must read back bit-exactly: random bit
// patterns cover all exponents, subnormals included, plus a few hand-picked edge values.
TEST(MetricsJson, Float32ValuesRoundTripThroughTheText) {
  std::mt19937 rng(1234);
  std::vector<float> values{0.0f,
                            -0.0f,
                            1.0f,
                            0.1f,
                            2.30258512f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            std::nextafter(1.0f, 2.0f),
                            16777217.0f,
                            65504.0f};
  while (values.size() < 20000) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isfinite(f)) values.push_back(f);
  }
  for (float f : values) {
    const StepMetrics m{.loss = f, .lr = f, .grad_norm = f};
    const std::string json = to_json(m);
    for (const char* key : {"loss", "lr", "grad_norm"}) {
      const std::string text = value_of(json, key);
      char* end = nullptr;
      const auto back = static_cast<float>(std::strtod(text.c_str(), &end));
      ASSERT_EQ(*end, '\0') << text;
      ASSERT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(f)) << key << " " << text;
    }
  }
}

class MetricsWriterTest : public ::testing::Test {
 protected:
  // One folder per process: ctest runs these cases in parallel, and a shared folder was removed by one
  // case's TearDown while another wrote into it.
  std::filesystem::path dir_ =
      std::filesystem::path(::testing::TempDir()) / ("metrics_writer_test." + std::to_string(::getpid()));
  void SetUp() override {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
};

TEST_F(MetricsWriterTest, WritesOneFlushedLinePerRecord) {
  const std::string path = (dir_ / "run.jsonl").string();
  auto writer = MetricsWriter::open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const StepMetrics step{.step = 1, .loss = 0.5, .lr = 0.25, .scale = 2, .grad_norm = 1, .samples_per_s = 100};
  (*writer)->write(step);
  // Flushed: visible to a reader before the writer is closed.
  EXPECT_EQ(read_all(path), to_json(step) + "\n");
  const EvalMetrics eval{.step = 1, .loss = 0.75, .accuracy = 0.5};
  const RunSummary summary{.steps = 1, .final_scale = 2, .test_accuracy = 0.5, .samples_per_s = 100, .wall_s = 1};
  (*writer)->write(eval);
  (*writer)->write(summary);
  EXPECT_TRUE((*writer)->status().ok()) << (*writer)->status();
  writer->reset();
  EXPECT_EQ(read_all(path), to_json(step) + "\n" + to_json(eval) + "\n" + to_json(summary) + "\n");
}

TEST_F(MetricsWriterTest, OpenTruncatesAnOldFile) {
  const std::string path = (dir_ / "run.jsonl").string();
  std::ofstream(path) << "old contents\n";
  auto writer = MetricsWriter::open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ(read_all(path), "");
}

TEST_F(MetricsWriterTest, OpenInAMissingFolderNamesThePathAndReason) {
  const std::string path = (dir_ / "no_such_dir" / "run.jsonl").string();
  auto writer = MetricsWriter::open(path);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(writer.status().message().find(path), std::string::npos) << writer.status();
  EXPECT_NE(writer.status().message().find("No such file or directory"), std::string::npos) << writer.status();
}

TEST_F(MetricsWriterTest, OpenResumedKeepsTheRunUpToItsCheckpointAndAppends) {
  const std::string path = (dir_ / "run.jsonl").string();
  // What a run killed after step 5 left, its checkpoint at step 4: steps 1-5, an evaluation at 4, a summary
  // of an earlier part, and a line cut short by the kill.
  std::string before, kept;
  for (int64_t step = 1; step <= 5; ++step) {
    const std::string line = to_json(StepMetrics{.step = step, .loss = 1.0 / static_cast<double>(step)}) + "\n";
    before += line;
    if (step <= 4) kept += line;
    if (step == 4) {
      const std::string eval = to_json(EvalMetrics{.step = 4, .loss = 0.5}) + "\n";
      before += eval;
      kept += eval;
    }
  }
  before += to_json(RunSummary{.steps = 5}) + "\n";
  before += to_json(StepMetrics{.step = 6}).substr(0, 30);
  std::ofstream(path) << before;

  auto writer = MetricsWriter::open_resumed(path, 4);
  ASSERT_TRUE(writer.ok()) << writer.status();
  kept += R"({"event": "resumed", "step": 4})"
          "\n";
  EXPECT_EQ(read_all(path), kept);
  const StepMetrics next{.step = 5, .loss = 0.2};
  (*writer)->write(next);
  EXPECT_EQ(read_all(path), kept + to_json(next) + "\n");
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
}

TEST_F(MetricsWriterTest, OpenResumedStartsAMissingFile) {
  const std::string path = (dir_ / "new.jsonl").string();
  auto writer = MetricsWriter::open_resumed(path, 40);
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_EQ(read_all(path), R"({"event": "resumed", "step": 40})"
                            "\n");
}

TEST_F(MetricsWriterTest, OpenResumedInAMissingFolderNamesThePath) {
  const std::string path = (dir_ / "no_such_dir" / "run.jsonl").string();
  auto writer = MetricsWriter::open_resumed(path, 4);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(path), std::string::npos) << writer.status();
}

TEST(MetricsWriter, WriteErrorBecomesStatusNamingTheFile) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  auto writer = MetricsWriter::open("/dev/full");
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE((*writer)->status().ok());
  (*writer)->write(StepMetrics{.step = 1});
  (*writer)->write(StepMetrics{.step = 2});
  const absl::Status status = (*writer)->status();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/dev/full"), std::string::npos) << status;
  EXPECT_NE(status.message().find("No space left on device"), std::string::npos) << status;
}

}  // namespace
}  // namespace mantissa
