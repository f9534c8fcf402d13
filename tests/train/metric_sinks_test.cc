// MetricSinks: no sink does nothing; what is written after open() is in both files once flushed (lines as
// to_json writes them, events with their steps and histograms); histograms are due at the multiples of
// histogram_every only with an event file; a resumed open keeps the lines up to its step and starts the new
// event file after it; a metrics file that cannot be opened leaves no event file; a stop writes its line and
// no summary; a write error is the status.
#include "train/metric_sinks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/train/tensorboard_reader.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;
using testing_tb::Event;

using testing::TempDir;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool has_scalar(const Event& e, const std::string& tag) {
  for (const auto& [name, value] : e.scalars) {
    if (name == tag) return true;
  }
  return false;
}

TEST(MetricSinks, NoSinkDoesNothing) {
  MetricSinks sinks;
  ASSERT_TRUE(sinks.open(0).ok());
  EXPECT_FALSE(sinks.histograms_due(100));
  sinks.write(StepMetrics{.step = 1}, std::nullopt);
  sinks.write(EvalMetrics{.step = 1});
  EXPECT_TRUE(sinks.write(StopEvent{.step = 1}).ok());
  sinks.flush();
  EXPECT_TRUE(sinks.status().ok());
  EXPECT_TRUE(sinks.finish(RunSummary{.steps = 1}).ok());
}

TEST(MetricSinks, WritesAfterOpenAreInBothFilesOnceFlushed) {
  TempDir dir("metric_sinks_write");
  MetricSinks sinks({.metrics_path = dir / "run.jsonl", .tensorboard_dir = dir / "tb", .histogram_every = 2});
  ASSERT_TRUE(sinks.open(0).ok());
  Tensor p = zeros({3}).set_requires_grad(true);
  p.set_grad(from_vector(std::vector<float>{0.5f, -0.25f, 0.0f}));
  const std::optional<GradientHistograms> histograms = gradient_histograms(std::vector<NamedTensor>{{"p", p}});
  const StepMetrics step1{.step = 1, .loss = 2.0, .lr = 0.1, .grad_norm = 0.5};
  const StepMetrics step2{.step = 2, .loss = 1.5, .lr = 0.1, .grad_norm = 0.25};
  const EvalMetrics eval{.step = 2, .loss = 1.25, .accuracy = 0.5};
  sinks.write(step1, std::nullopt);
  sinks.write(step2, histograms);
  sinks.write(eval);
  sinks.flush();
  EXPECT_TRUE(sinks.status().ok()) << sinks.status();
  EXPECT_EQ(lines_of(dir / "run.jsonl"), (std::vector<std::string>{to_json(step1), to_json(step2), to_json(eval)}));

  const std::vector<Event> events = testing_tb::read_dir(dir / "tb");
  // file_version, START at 0, step 1, step 2, its histograms, the evaluation.
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[1].session_status, 1);  // SessionLog START
  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(events[2].step, 1);
  EXPECT_TRUE(has_scalar(events[2], "train/loss"));
  EXPECT_EQ(events[3].step, 2);
  EXPECT_EQ(events[4].step, 2);
  EXPECT_EQ(events[4].histograms.size(), 2u);  // grad/log2_abs, grad/values
  EXPECT_EQ(events[5].step, 2);
  EXPECT_TRUE(has_scalar(events[5], "eval/loss"));

  const RunSummary summary{.steps = 2, .val_loss = 1.25};
  EXPECT_TRUE(sinks.finish(summary).ok());
  EXPECT_EQ(lines_of(dir / "run.jsonl").back(), to_json(summary));
}

TEST(MetricSinks, HistogramsAreDueAtTheMultiplesOfTheirIntervalWithAnEventFile) {
  TempDir dir("metric_sinks_due");
  MetricSinks sinks({.tensorboard_dir = dir / "tb", .histogram_every = 3});
  EXPECT_FALSE(sinks.histograms_due(3)) << "no event file before open()";
  ASSERT_TRUE(sinks.open(0).ok());
  EXPECT_TRUE(sinks.histograms_due(3));
  EXPECT_TRUE(sinks.histograms_due(6));
  EXPECT_FALSE(sinks.histograms_due(4));

  MetricSinks none({.tensorboard_dir = dir / "tb0", .histogram_every = 0});
  ASSERT_TRUE(none.open(0).ok());
  EXPECT_FALSE(none.histograms_due(3));
  MetricSinks metrics_only({.metrics_path = dir / "m.jsonl", .histogram_every = 3});
  ASSERT_TRUE(metrics_only.open(0).ok());
  EXPECT_FALSE(metrics_only.histograms_due(3));
}

TEST(MetricSinks, AResumedOpenKeepsTheLinesUpToItsStepAndStartsTheEventsAfterIt) {
  TempDir dir("metric_sinks_resume");
  const MetricSinksOptions options{.metrics_path = dir / "run.jsonl", .tensorboard_dir = dir / "tb"};
  {
    MetricSinks first(options);
    ASSERT_TRUE(first.open(0).ok());
    for (int64_t step = 1; step <= 4; ++step) first.write(StepMetrics{.step = step}, std::nullopt);
    first.flush();
  }
  MetricSinks resumed(options);
  ASSERT_TRUE(resumed.open(2).ok());
  const std::vector<std::string> lines = lines_of(dir / "run.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], to_json(StepMetrics{.step = 1}));
  EXPECT_EQ(lines[1], to_json(StepMetrics{.step = 2}));
  EXPECT_NE(lines[2].find("resumed"), std::string::npos) << lines[2];
  EXPECT_EQ(metrics_line_step(lines[2]), 2);

  const std::vector<std::string> files = testing_tb::event_files(dir / "tb");
  ASSERT_EQ(files.size(), 2u);
  const testing_tb::Records records = testing_tb::read_records(testing_tb::read_file(files[1]));
  ASSERT_EQ(records.data.size(), 2u);  // file_version, START
  const Event start = testing_tb::decode_event(records.data[1]);
  EXPECT_EQ(start.session_status, 1);
  EXPECT_EQ(start.step, 3);
}

TEST(MetricSinks, AMetricsFileThatCannotBeOpenedLeavesNoEventFile) {
  TempDir dir("metric_sinks_discard");
  const std::string metrics = dir / "missing/run.jsonl";
  MetricSinks sinks({.metrics_path = metrics, .tensorboard_dir = dir / "tb"});
  const absl::Status status = sinks.open(0);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(metrics), std::string::npos) << status;
  EXPECT_TRUE(fs::is_directory(dir / "tb"));
  EXPECT_TRUE(testing_tb::event_files(dir / "tb").empty());
}

TEST(MetricSinks, AStopWritesItsLineAndNoSummary) {
  TempDir dir("metric_sinks_stop");
  MetricSinks sinks({.metrics_path = dir / "run.jsonl"});
  ASSERT_TRUE(sinks.open(0).ok());
  sinks.write(StepMetrics{.step = 1}, std::nullopt);
  const StopEvent stop{.step = 1, .signal = 15, .checkpoint = "step_1.h5"};
  EXPECT_TRUE(sinks.write(stop).ok());
  EXPECT_TRUE(sinks.finish(RunSummary{.steps = 1, .stopped = stop}).ok());
  EXPECT_EQ(lines_of(dir / "run.jsonl"), (std::vector<std::string>{to_json(StepMetrics{.step = 1}), to_json(stop)}));
}

TEST(MetricSinks, AWriteErrorIsTheStatus) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  TempDir dir("metric_sinks_error");
  MetricSinks sinks({.metrics_path = "/dev/full", .tensorboard_dir = dir / "tb"});
  ASSERT_TRUE(sinks.open(0).ok());
  sinks.write(StepMetrics{.step = 1}, std::nullopt);
  const absl::Status status = sinks.status();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/dev/full"), std::string::npos) << status;
  EXPECT_FALSE(sinks.write(StopEvent{.step = 1}).ok());
  EXPECT_FALSE(sinks.finish(RunSummary{.steps = 1}).ok());
}

}  // namespace
}  // namespace mantissa
