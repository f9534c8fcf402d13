// ProgressReporter on a fake clock, writing to a temporary file: the plain lines (time, step count, epoch
// end), the bar (content, '\r' redraws, rate limit), the ETA, smoothed loss, skipped steps, eval lines and
// the summary block.
#include "train/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace mantissa {
namespace {

// A temporary file the reporter writes to; text() reads back all that was written.
class Capture {
 public:
  Capture() : file_(std::tmpfile()) {}
  ~Capture() { std::fclose(file_); }
  std::FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    const long end = std::ftell(file_);
    std::string out(static_cast<size_t>(end), '\0');
    std::rewind(file_);
    const size_t got = std::fread(out.data(), 1, out.size(), file_);
    out.resize(got);
    std::fseek(file_, 0, SEEK_END);
    return out;
  }
  std::vector<std::string> lines() {
    std::vector<std::string> out;
    const std::string all = text();
    size_t begin = 0;
    for (size_t nl = all.find('\n'); nl != std::string::npos; nl = all.find('\n', begin)) {
      out.push_back(all.substr(begin, nl - begin));
      begin = nl + 1;
    }
    return out;
  }

 private:
  std::FILE* file_;
};

StepMetrics step_at(int64_t step, int64_t epoch = 0) {
  return {.step = step, .epoch = epoch, .loss = 1.0, .lr = 1e-3, .scale = 65536, .grad_norm = 1, .samples_per_s = 1000};
}

int64_t count_of(const std::string& text, char c) { return std::count(text.begin(), text.end(), c); }

TEST(ProgressFormat, ThousandsAndDurations) {
  EXPECT_EQ(with_thousands(0), "0");
  EXPECT_EQ(with_thousands(999), "999");
  EXPECT_EQ(with_thousands(4512), "4,512");
  EXPECT_EQ(with_thousands(1234567), "1,234,567");
  EXPECT_EQ(with_thousands(-21000), "-21,000");
  EXPECT_EQ(clock_duration(0), "0:00");
  EXPECT_EQ(clock_duration(42), "0:42");
  EXPECT_EQ(clock_duration(61.25), "1:01");
  EXPECT_EQ(clock_duration(3599.4), "59:59");
  EXPECT_EQ(clock_duration(9998), "2:46:38");
  EXPECT_EQ(clock_duration(std::numeric_limits<double>::infinity()), "?");
}

TEST(Progress, AutoStyleIsLinesWhenNotATerminal) {
  Capture out;
  EXPECT_EQ(ProgressReporter(out.file(), {}).style(), ProgressStyle::kLines);
  EXPECT_EQ(ProgressReporter(out.file(), {.style = ProgressStyle::kBar}).style(), ProgressStyle::kBar);
}

// Steps every 0.5 s, a line every 5 s and at each epoch end (25 steps), the first step at once.
TEST(Progress, LinesByTimeAndAtEpochEnds) {
  Capture out;
  double t = 0;
  ProgressReporter progress(
      out.file(),
      {.style = ProgressStyle::kLines, .total_steps = 101, .steps_per_epoch = 25, .line_interval_s = 5, .now = [&] {
         return t;
       }});
  std::vector<int64_t> printed;
  for (int64_t s = 1; s <= 101; ++s) {
    t = 0.5 * static_cast<double>(s);
    const size_t before = out.lines().size();
    progress.on_step(step_at(s, (s - 1) / 25));
    if (out.lines().size() > before) printed.push_back(s);
  }
  // An epoch-end line restarts the 5 s (10 step) interval.
  EXPECT_EQ(printed, (std::vector<int64_t>{1, 11, 21, 25, 35, 45, 50, 60, 70, 75, 85, 95, 100}));
  // Step 11: 10 steps in 5 s since step 1, 90 steps left -> 45 s.
  EXPECT_EQ(out.lines()[1], "step 11/101 epoch 0 loss 1.0000 scale 65536 1,000 samples/s ETA 0:45");
  EXPECT_EQ(out.lines()[0], "step 1/101 epoch 0 loss 1.0000 scale 65536 1,000 samples/s ETA ?");
  EXPECT_EQ(count_of(out.text(), '\r'), 0);
}

TEST(Progress, LinesEveryNStepsAndUnknownTotal) {
  Capture out;
  double t = 0;
  ProgressReporter progress(
      out.file(),
      {.style = ProgressStyle::kLines, .line_interval_s = 1e9, .line_every_steps = 4, .now = [&] { return t; }});
  for (int64_t s = 1; s <= 10; ++s) {
    t = static_cast<double>(s);
    progress.on_step(step_at(s));
  }
  // No total: no fraction and no ETA.
  EXPECT_EQ(out.lines(), (std::vector<std::string>{
                             "step 1 epoch 0 loss 1.0000 scale 65536 1,000 samples/s",
                             "step 4 epoch 0 loss 1.0000 scale 65536 1,000 samples/s",
                             "step 8 epoch 0 loss 1.0000 scale 65536 1,000 samples/s",
                         }));
}

TEST(Progress, EtaCountsFromTheFirstStepSeenAndShowsHours) {
  Capture out;
  double t = 100;  // a resumed run: the first step seen is 501, at t = 100
  ProgressReporter progress(
      out.file(),
      {.style = ProgressStyle::kLines, .total_steps = 10500, .line_interval_s = 0, .now = [&] { return t; }});
  progress.on_step(step_at(501));
  t = 102;
  progress.on_step(step_at(502));
  t = 104;  // 2 steps in 4 s since step 501: 2 s a step, 9997 steps left
  progress.on_step(step_at(503));
  EXPECT_EQ(out.lines()[2], "step 503/10500 epoch 0 loss 1.0000 scale 65536 1,000 samples/s ETA 5:33:14");
}

TEST(Progress, SmoothedLossOverTheWindowAndSkippedStepsCounted) {
  Capture out;
  double t = 0;
  ProgressReporter progress(
      out.file(), {.style = ProgressStyle::kLines, .line_interval_s = 0, .window = 4, .now = [&] { return t; }});
  for (int64_t s = 1; s <= 5; ++s) {
    StepMetrics m = step_at(s);
    m.loss = static_cast<double>(s);
    m.samples_per_s = 1000.0 * static_cast<double>(s);
    progress.on_step(m);
  }
  // Last 4 losses 2..5: mean 3.5; rates 2000..5000: mean 3500.
  EXPECT_EQ(out.lines().back(), "step 5 epoch 0 loss 3.5000 scale 65536 3,500 samples/s");
  // A skipped fp16 step: inf grads, the scale halves; its nan loss stays out of the mean, its rate counts
  // (rates 3000, 4000, 5000, 5000).
  StepMetrics skipped = step_at(6);
  skipped.loss = std::numeric_limits<double>::quiet_NaN();
  skipped.samples_per_s = 5000;
  skipped.skipped = true;
  skipped.scale = 32768;
  progress.on_step(skipped);
  EXPECT_EQ(out.lines().back(), "step 6 epoch 0 loss 3.5000 scale 32768 skipped 1 4,250 samples/s");
  skipped.step = 7;
  progress.on_step(skipped);
  EXPECT_EQ(progress.skipped_steps(), 2);
  EXPECT_NE(out.lines().back().find(" skipped 2 "), std::string::npos) << out.lines().back();
}

// Steps every 1/32 s, redraws at most every 0.1 s: at steps 1, 5, 9, 13, 17 and the last, 20.
TEST(Progress, BarRedrawsInPlaceAtMostTenTimesASecond) {
  Capture out;
  double t = 0;
  ProgressReporter progress(
      out.file(), {.style = ProgressStyle::kBar, .total_steps = 20, .columns = 200, .now = [&] { return t; }});
  for (int64_t s = 1; s <= 20; ++s) {
    t = static_cast<double>(s) / 32;
    progress.on_step(step_at(s));
  }
  const std::string text = out.text();
  EXPECT_EQ(count_of(text, '\r'), 6);
  EXPECT_EQ(count_of(text, '\n'), 0);  // one line, redrawn
  // Step 5 of 20: 25%, 4 steps in 0.125 s, 15 left -> 0.47 s.
  EXPECT_NE(text.find("\r[#####...............] 25% step 5/20 epoch 0 loss 1.0000 scale 65536 "
                      "1,000 samples/s ETA 0:00\r"),
            std::string::npos)
      << text;
  EXPECT_TRUE(
      text.ends_with("\r[####################] 100% step 20/20 epoch 0 loss 1.0000 scale 65536 "
                     "1,000 samples/s ETA 0:00"))
      << text;
}

// A line longer than the terminal wraps, and '\r' then redraws only its last row: the bar shrinks to fit.
TEST(Progress, BarFitsANarrowTerminal) {
  const StepMetrics m{.step = 1056, .epoch = 2, .loss = 0.4123, .scale = 32768, .samples_per_s = 4512};
  const std::string status = "45% step 1056/2345 epoch 2 loss 0.4123 scale 32768 4,512 samples/s ETA ?";
  auto drawn = [&](int columns) {
    Capture out;
    ProgressReporter progress(
        out.file(), {.style = ProgressStyle::kBar, .total_steps = 2345, .columns = columns, .now = [] { return 0.0; }});
    progress.on_step(m);
    return out.text().substr(1);  // after the '\r'
  };
  EXPECT_EQ(drawn(200), "[#########...........] " + status);
  ASSERT_EQ(status.size(), 72u);
  // 90 columns: 89 characters at most, the bar takes what the status leaves (14; 6 of them done).
  EXPECT_EQ(drawn(90), "[######........] " + status);
  EXPECT_EQ(drawn(80), status);                // room for a bar of 4: less than 5 is no bar
  EXPECT_EQ(drawn(40), status.substr(0, 39));  // cut at the edge
  // Not a terminal and no width given: 80.
  Capture out;
  ProgressReporter progress(out.file(), {.style = ProgressStyle::kBar, .total_steps = 2345, .now = [] { return 0.0; }});
  progress.on_step(m);
  EXPECT_EQ(out.text().substr(1), status);
}

TEST(Progress, BarOverwritesALongerBarWithSpaces) {
  Capture out;
  double t = 0;
  ProgressReporter progress(
      out.file(),
      {.style = ProgressStyle::kBar, .total_steps = 100, .redraw_interval_s = 0, .columns = 200, .now = [&] {
         return t;
       }});
  StepMetrics m = step_at(1);
  m.samples_per_s = 1234567;
  progress.on_step(m);
  m = step_at(2);
  m.samples_per_s = 1;  // the mean rate falls from 1,234,567 to 617,284: 2 characters shorter
  progress.on_step(m);
  const std::string text = out.text();
  const size_t second = text.rfind('\r');
  EXPECT_EQ(text.size() - second, second) << "the redraw covers the whole previous bar: " << text;
  EXPECT_TRUE(text.ends_with("samples/s ETA ?  ")) << text;  // no time passed: no ETA yet
}

TEST(Progress, EvalPrintsOnItsOwnLineAndTheBarComesBack) {
  Capture out;
  double t = 0;
  ProgressReporter progress(
      out.file(), {.style = ProgressStyle::kBar, .total_steps = 10, .columns = 200, .now = [&] { return t; }});
  progress.on_step(step_at(1));
  progress.on_eval({.step = 1, .epoch = 0, .loss = 0.45, .accuracy = 0.8412});
  const std::string text = out.text();
  const size_t nl = text.find('\n');
  ASSERT_NE(nl, std::string::npos) << text;
  // The eval text overwrites the bar (padded to its width), then the bar is drawn again below.
  const std::string eval_line = text.substr(text.find('\r', 1) + 1, nl - text.find('\r', 1) - 1);
  EXPECT_TRUE(eval_line.starts_with("eval step 1 epoch 0: loss 0.4500 accuracy 84.12%   ")) << eval_line;
  EXPECT_EQ(eval_line.size(), text.find('\r', 1) - 1);
  EXPECT_TRUE(text.substr(nl + 1).starts_with("\r[##..................] 10% step 1/10")) << text;
}

TEST(Progress, EvalInLinesModeWithoutAccuracy) {
  Capture out;
  ProgressReporter progress(out.file(), {.style = ProgressStyle::kLines, .now = [] { return 0.0; }});
  progress.on_eval({.step = 2000, .epoch = 3, .loss = 1.25});
  EXPECT_EQ(out.text(), "eval step 2000 epoch 3: loss 1.2500\n");
}

TEST(Progress, SummaryBlockEndsTheBarLine) {
  Capture out;
  double t = 0;
  ProgressReporter progress(
      out.file(), {.style = ProgressStyle::kBar, .total_steps = 2345, .columns = 200, .now = [&] { return t; }});
  progress.on_step(step_at(1));
  t = 0.01;
  progress.on_step(step_at(2));  // held back by the rate limit; the summary draws it
  progress.on_summary({.steps = 2345,
                       .skipped_steps = 3,
                       .final_scale = 32768,
                       .test_accuracy = 0.8775,
                       .samples_per_s = 21000.4,
                       .wall_s = 61.25});
  const std::string text = out.text();
  const size_t block = text.find("\nrun summary\n");
  ASSERT_NE(block, std::string::npos) << text;
  EXPECT_NE(text.rfind("\r[", block), std::string::npos);
  EXPECT_NE(text.substr(0, block).find("step 2/2345"), std::string::npos) << text;
  EXPECT_EQ(text.substr(block + 1),
            "run summary\n"
            "  steps           2345\n"
            "  skipped steps   3\n"
            "  final scale     32768\n"
            "  test accuracy   87.75%\n"
            "  samples/s       21,000 (median)\n"
            "  wall time       1:01 (61.2 s)\n");
}

TEST(Progress, SummaryWithValidationLoss) {
  Capture out;
  ProgressReporter progress(out.file(), {.style = ProgressStyle::kLines, .now = [] { return 0.0; }});
  progress.on_summary({.steps = 2000, .final_scale = 1, .val_loss = 1.5, .samples_per_s = 800, .wall_s = 3725});
  EXPECT_EQ(out.text(),
            "run summary\n"
            "  steps           2000\n"
            "  skipped steps   0\n"
            "  final scale     1\n"
            "  val loss        1.5000\n"
            "  samples/s       800 (median)\n"
            "  wall time       1:02:05 (3725.0 s)\n");
}

// A run resumed at step 500 that had skipped 3 steps: the bar's percentage, the skipped count and the ETA
// count from the run's start; a stopped run's summary says where and why it stopped.
TEST(Progress, AResumedRunCountsFromItsStartAndAStopIsReported) {
  Capture out;
  double t = 50;
  ProgressReporter progress(
      out.file(), {.style = ProgressStyle::kBar, .total_steps = 1000, .skipped_before = 3, .columns = 200, .now = [&] {
                     return t;
                   }});
  progress.on_step(step_at(501));
  t = 51;
  progress.on_step(step_at(511));  // 10 steps a second since step 501: 489 steps left, 49 s
  StepMetrics skipped = step_at(512);
  skipped.skipped = true;
  t = 52;
  progress.on_step(skipped);
  progress.on_summary({.steps = 512,
                       .skipped_steps = 4,
                       .final_scale = 32768,
                       .samples_per_s = 1000,
                       .wall_s = 125,
                       .stopped = StopEvent{.step = 512, .signal = SIGTERM, .checkpoint = "run/step_512.h5"}});
  const std::string text = out.text();
  EXPECT_NE(text.find("[##########..........] 51% step 511/1000 epoch 0 loss 1.0000 scale 65536 skipped 3 1,000 "
                      "samples/s ETA 0:49"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("51% step 512/1000 epoch 0 loss 1.0000 scale 65536 skipped 4 "), std::string::npos) << text;
  EXPECT_NE(text.find("  wall time       2:05 (125.0 s)\n"
                      "  stopped         by SIGTERM at step 512, checkpoint run/step_512.h5\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace mantissa
