// ProgressReporter: the bar (one line redrawn with '\r', rate-limited), the plain lines (by time, step count
// and epoch end), the evaluation lines and the summary block.
#include "train/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <sys/ioctl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "train/stop.h"

namespace mantissa {
namespace {

double mean_of(const std::deque<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// Keeps the last `window` finite values.
void push_window(std::deque<double>& values, double value, int64_t window) {
  if (!std::isfinite(value)) return;
  values.push_back(value);
  while (static_cast<int64_t>(values.size()) > std::max<int64_t>(window, 1)) values.pop_front();
}

// Loss scales are powers of two: print 65536, not 6.5536e+04.
std::string scale_text(double scale) {
  if (std::isfinite(scale) && scale >= 1 && scale < 1e15 && scale == std::floor(scale)) {
    return absl::StrFormat("%.0f", scale);
  }
  return absl::StrFormat("%g", scale);
}

std::string loss_text(double loss) { return absl::StrFormat("%.4f", loss); }

}  // namespace

std::string with_thousands(int64_t value) {
  std::string digits = absl::StrCat(value < 0 ? -static_cast<uint64_t>(value) : static_cast<uint64_t>(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string clock_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s % 3600 / 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

ProgressReporter::ProgressReporter(std::FILE* out, ProgressOptions options)
    : out_(out), options_(std::move(options)), style_(options_.style), skipped_(options_.skipped_before) {
  if (style_ == ProgressStyle::kAuto) {
    const int fd = out_ == nullptr ? -1 : fileno(out_);
    style_ = fd >= 0 && isatty(fd) ? ProgressStyle::kBar : ProgressStyle::kLines;
  }
  columns_ = options_.columns;
  if (columns_ <= 0) {
    winsize size{};
    const int fd = out_ == nullptr ? -1 : fileno(out_);
    columns_ = fd >= 0 && ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0 ? size.ws_col : 80;
  }
}

double ProgressReporter::now() const {
  if (options_.now) return options_.now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "step 1055/2345 epoch 2 loss 0.4123 scale 32768 skipped 3 4,512 samples/s ETA 0:42": loss and samples/s
// are means over the last `window` steps; the ETA divides the steps left by the steps/s since the first step.
std::string ProgressReporter::status_text(const StepMetrics& m) const {
  const int64_t total = options_.total_steps;
  std::string text = total > 0 ? absl::StrCat("step ", m.step, "/", total) : absl::StrCat("step ", m.step);
  absl::StrAppend(&text, " epoch ", m.epoch, " loss ", losses_.empty() ? "nan" : loss_text(mean_of(losses_)), " scale ",
                  scale_text(m.scale));
  if (skipped_ > 0) absl::StrAppend(&text, " skipped ", skipped_);
  if (!rates_.empty()) {
    absl::StrAppend(&text, " ", with_thousands(std::llround(mean_of(rates_))), " samples/s");
  }
  if (total > 0) {
    const double elapsed = now() - first_time_;
    const int64_t done = m.step - first_step_;
    if (done > 0 && elapsed > 0) {
      const double left = static_cast<double>(std::max<int64_t>(total - m.step, 0));
      absl::StrAppend(&text, " ETA ", clock_duration(left * elapsed / static_cast<double>(done)));
    } else {
      absl::StrAppend(&text, " ETA ?");
    }
  }
  return text;
}

// "[#########...........] 45% " + status_text, or the status alone when the total is unknown. On a narrow
// terminal the bar shrinks, then goes; the status is cut at the right edge as a last resort.
std::string ProgressReporter::bar_text(const StepMetrics& m) const {
  const auto room = static_cast<size_t>(std::max(columns_ - 1, 1));
  std::string text = status_text(m);
  const int64_t total = options_.total_steps;
  if (total > 0) {
    // Integer arithmetic: 29 / 100 * 100 in doubles is 28.999...
    const int64_t done = std::clamp<int64_t>(m.step, 0, total);
    text = absl::StrCat(done * 100 / total, "% ", text);
    const int64_t spare = static_cast<int64_t>(room) - static_cast<int64_t>(text.size()) - 3;  // "[" "] "
    const int64_t width = std::min<int64_t>(std::max(options_.bar_width, 0), spare);
    if (width >= 5) {
      const int64_t filled = done * width / total;
      text = absl::StrCat("[", std::string(static_cast<size_t>(filled), '#'),
                          std::string(static_cast<size_t>(width - filled), '.'), "] ", text);
    }
  }
  if (text.size() > room) text.resize(room);
  return text;
}

void ProgressReporter::draw_bar() {
  std::string text = bar_text(last_);
  const size_t width = text.size();
  if (width < drawn_width_) text.append(drawn_width_ - width, ' ');  // wipe the tail of a longer bar
  put("\r" + text);
  drawn_width_ = width;
}

void ProgressReporter::end_bar_line() {
  if (drawn_width_ == 0) return;
  put("\n");
  drawn_width_ = 0;
}

void ProgressReporter::put(const std::string& text) {
  std::fputs(text.c_str(), out_);
  std::fflush(out_);
}

void ProgressReporter::on_step(const StepMetrics& m) {
  const double t = now();
  const bool first = !have_step_;
  if (first) {
    first_step_ = m.step;
    first_time_ = t;
  }
  have_step_ = true;
  last_ = m;
  if (m.skipped) ++skipped_;
  push_window(losses_, m.loss, options_.window);
  push_window(rates_, m.samples_per_s, options_.window);

  if (style_ == ProgressStyle::kBar) {
    const bool last_step = options_.total_steps > 0 && m.step >= options_.total_steps;
    if (first || last_step || t - last_draw_ >= options_.redraw_interval_s) {
      draw_bar();
      last_draw_ = t;
    }
    return;
  }
  const bool epoch_end = options_.steps_per_epoch > 0 && m.step % options_.steps_per_epoch == 0;
  const bool every = options_.line_every_steps > 0 && m.step % options_.line_every_steps == 0;
  if (first || epoch_end || every || t - last_line_ >= options_.line_interval_s) {
    put(status_text(m) + "\n");
    last_line_ = t;
  }
}

// "eval step 469 epoch 0: loss 0.4500 accuracy 84.12%" on its own line; a bar is redrawn below it.
void ProgressReporter::on_eval(const EvalMetrics& m) {
  std::string text = absl::StrCat("eval step ", m.step, " epoch ", m.epoch, ": loss ", loss_text(m.loss));
  if (m.accuracy.has_value()) absl::StrAppend(&text, absl::StrFormat(" accuracy %.2f%%", *m.accuracy * 100));
  if (drawn_width_ > 0) {
    if (text.size() < drawn_width_) text.append(drawn_width_ - text.size(), ' ');  // over the bar
    put("\r" + text + "\n");
    drawn_width_ = 0;
    draw_bar();
    return;
  }
  put(text + "\n");
}

void ProgressReporter::on_summary(const RunSummary& s) {
  if (style_ == ProgressStyle::kBar && have_step_) {
    draw_bar();  // the final state, whatever the rate limit held back
    end_bar_line();
  }
  std::string text = "run summary\n";
  absl::StrAppend(&text, absl::StrFormat("  %-15s %d\n", "steps", s.steps));
  absl::StrAppend(&text, absl::StrFormat("  %-15s %d\n", "skipped steps", s.skipped_steps));
  absl::StrAppend(&text, absl::StrFormat("  %-15s %s\n", "final scale", scale_text(s.final_scale)));
  if (s.test_accuracy.has_value()) {
    absl::StrAppend(&text, absl::StrFormat("  %-15s %.2f%%\n", "test accuracy", *s.test_accuracy * 100));
  }
  if (s.val_loss.has_value()) {
    absl::StrAppend(&text, absl::StrFormat("  %-15s %s\n", "val loss", loss_text(*s.val_loss)));
  }
  const std::string rate = std::isfinite(s.samples_per_s) ? with_thousands(std::llround(s.samples_per_s)) : "?";
  absl::StrAppend(&text, absl::StrFormat("  %-15s %s (median)\n", "samples/s", rate));
  absl::StrAppend(&text, absl::StrFormat("  %-15s %s (%.1f s)\n", "wall time", clock_duration(s.wall_s), s.wall_s));
  if (s.stopped.has_value()) {
    std::string how = s.stopped->signal != 0 ? absl::StrCat("by ", signal_name(s.stopped->signal), " ") : "";
    absl::StrAppend(&how, "at step ", s.stopped->step,
                    s.stopped->checkpoint.empty() ? ", nothing saved" : ", checkpoint " + s.stopped->checkpoint);
    absl::StrAppend(&text, absl::StrFormat("  %-15s %s\n", "stopped", how));
  }
  put(text);
}

}  // namespace mantissa
