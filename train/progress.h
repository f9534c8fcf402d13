// What a run shows on the console: a progress bar redrawn in place on a terminal, plain periodic lines
// otherwise (a log file, CI), evaluation results on their own lines and a summary block at the end.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <string>

#include "train/metrics.h"

namespace mantissa {

// kAuto: kBar when the output is a terminal, else kLines.
enum class ProgressStyle { kAuto, kBar, kLines };

struct ProgressOptions {
  ProgressStyle style = ProgressStyle::kAuto;
  int64_t total_steps = 0;         // steps of the whole run; 0: unknown (no percentage, no ETA)
  int64_t steps_per_epoch = 0;     // kLines writes a line at each epoch end; 0: unknown (no epoch-end lines)
  int64_t skipped_before = 0;      // steps the run skipped before the first one shown (a resumed run's)
  double line_interval_s = 5.0;    // kLines: seconds between lines
  int64_t line_every_steps = 0;    // kLines: also a line every N steps; 0: by time only
  double redraw_interval_s = 0.1;  // kBar: at most one redraw per this many seconds
  int64_t window = 20;             // steps in the smoothed loss and samples/s
  int bar_width = 20;              // characters between the brackets (fewer when the terminal is narrow)
  int columns = 0;                 // kBar: terminal width; 0: asked from the terminal (80 when it cannot tell)
  std::function<double()> now;     // seconds on a monotonic clock; empty: std::chrono::steady_clock
};

class ProgressReporter {
 public:
  ProgressReporter(std::FILE* out, ProgressOptions options);
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void on_step(const StepMetrics& m);
  void on_eval(const EvalMetrics& m);
  void on_summary(const RunSummary& s);

  ProgressStyle style() const { return style_; }  // kBar or kLines, never kAuto
  int64_t skipped_steps() const { return skipped_; }

 private:
  double now() const;
  std::string status_text(const StepMetrics& m) const;  // step, epoch, loss, scale, rate, ETA
  std::string bar_text(const StepMetrics& m) const;
  void draw_bar();      // '\r' + the bar over the previous one
  void end_bar_line();  // ends a drawn bar with '\n' so that other text starts on a fresh line
  void put(const std::string& text);

  std::FILE* out_;
  ProgressOptions options_;
  ProgressStyle style_;
  int columns_ = 80;  // kBar: a drawn line stays shorter than this, or the terminal wraps it and '\r' breaks

  StepMetrics last_;  // the latest step
  bool have_step_ = false;
  int64_t first_step_ = 0;   // the first step seen (a resumed run starts past 1)
  double first_time_ = 0.0;  // when it was seen: steps/s and the ETA count from there
  int64_t skipped_ = 0;
  std::deque<double> losses_;  // the last `window` finite losses
  std::deque<double> rates_;   // the last `window` finite samples/s

  double last_draw_ = 0.0;  // kBar: time of the latest redraw
  size_t drawn_width_ = 0;  // kBar: width of the bar on screen (0: none on the current line)
  double last_line_ = 0.0;  // kLines: time of the latest line
};

// Helpers, shared with the tests: 4512 -> "4,512"; seconds -> "M:SS" or "H:MM:SS".
std::string with_thousands(int64_t value);
std::string clock_duration(double seconds);

}  // namespace mantissa
