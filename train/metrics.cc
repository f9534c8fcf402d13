// The JSON lines of the metrics file: records to text (9 significant digits, null for non-finite numbers)
// and a writer that flushes each line and keeps the first write error.
#include "train/metrics.h"

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "train/checkpoint_file.h"
#include "train/stop.h"

namespace mantissa {
namespace {

// Builds one JSON object field by field, keys in the order they are added.
class JsonLine {
 public:
  JsonLine& integer(std::string_view key, int64_t value) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%" PRId64, value);
    return raw(key, buf);
  }
  // %.9g: 9 significant digits are enough for any float32 to parse back to the same float.
  JsonLine& number(std::string_view key, double value) {
    if (!std::isfinite(value)) return raw(key, "null");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", value);
    return raw(key, buf);
  }
  JsonLine& flag(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  JsonLine& null(std::string_view key) { return raw(key, "null"); }
  // `value` is one of our own fixed words: nothing in it needs escaping.
  JsonLine& text(std::string_view key, std::string_view value) {
    std::string quoted = "\"";
    quoted.append(value).append("\"");
    return raw(key, quoted);
  }

  std::string str() const { return "{" + body_ + "}"; }

 private:
  JsonLine& raw(std::string_view key, std::string_view value) {
    if (!body_.empty()) body_ += ", ";
    body_.append("\"").append(key).append("\": ").append(value);
    return *this;
  }
  std::string body_;
};

// fopen with the error a user can act on: "metrics: cannot create run.jsonl: No such file or directory".
absl::StatusOr<std::FILE*> open_file(const std::string& path, const char* mode) {
  std::FILE* file = std::fopen(path.c_str(), mode);
  if (file != nullptr) return file;
  const int err = errno;
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat("metrics: cannot ", *mode == 'a' ? "append to " : "create ", path, ": ",
                                   std::strerror(err), ". HINT: check that its folder exists and is writable"));
}

}  // namespace

std::string to_json(const StepMetrics& m) {
  JsonLine line;
  line.integer("step", m.step)
      .integer("epoch", m.epoch)
      .number("loss", m.loss)
      .number("lr", m.lr)
      .number("scale", m.scale)
      .flag("skipped", m.skipped)
      .number("grad_norm", m.grad_norm)
      .number("samples_per_s", m.samples_per_s);
  if (m.fp8_overflows.has_value()) line.integer("fp8_overflows", *m.fp8_overflows);
  return line.str();
}

std::string to_json(const EvalMetrics& m) {
  JsonLine line;
  line.text("event", "eval").integer("step", m.step).integer("epoch", m.epoch).number("loss", m.loss);
  if (m.accuracy.has_value()) line.number("accuracy", *m.accuracy);
  return line.str();
}

std::string to_json(const RunSummary& m) {
  JsonLine line;
  line.text("event", "summary")
      .integer("steps", m.steps)
      .integer("skipped_steps", m.skipped_steps)
      .number("final_scale", m.final_scale);
  if (m.test_accuracy.has_value()) line.number("test_accuracy", *m.test_accuracy);
  if (m.val_loss.has_value()) line.number("val_loss", *m.val_loss);
  line.number("samples_per_s", m.samples_per_s).number("wall_s", m.wall_s);
  return line.str();
}

std::string to_json(const StopEvent& m) {
  JsonLine line;
  line.text("event", "stopped").integer("step", m.step);
  if (m.signal != 0) {
    line.text("signal", signal_name(m.signal));
  } else {
    line.null("signal");
  }
  if (!m.checkpoint.empty()) {
    // Its name in the checkpoint folder, as the folder's `latest` file names it.
    line.text("checkpoint", std::filesystem::path(m.checkpoint).filename().string());
  } else {
    line.null("checkpoint");
  }
  return line.str();
}

std::optional<int64_t> metrics_line_step(std::string_view line) {
  // Every record but the summary has "step" as its first or second key (after "event").
  if (!line.starts_with("{") || !line.ends_with("}")) return std::nullopt;
  constexpr std::string_view kKey = "\"step\": ";
  const size_t at = line.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + kKey.size());
  rest = rest.substr(0, rest.find_first_of(",}"));
  int64_t step = 0;
  const auto [end, err] = std::from_chars(rest.data(), rest.data() + rest.size(), step);
  if (err != std::errc() || end != rest.data() + rest.size()) return std::nullopt;
  return step;
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::open_resumed(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::string kept, line;
    // getline's last piece, when the file does not end with '\n', is a line a crash cut short: dropped.
    std::stringstream all;
    all << in.rdbuf();
    const std::string text = all.str();
    size_t begin = 0;
    for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
      line = text.substr(begin, end - begin);
      const std::optional<int64_t> line_step = metrics_line_step(line);
      if (line_step && *line_step <= step) kept.append(line).append("\n");
    }
    in.close();
    if (absl::Status s = checkpoint_file::write_atomically(
            path, [&](const std::string& tmp) { return checkpoint_file::write_text(tmp, kept); });
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("metrics: cannot rewrite ", path, " for the resumed run: ",
                                                 s.message(), " (the file is left as it was)"));
    }
  }
  absl::StatusOr<std::FILE*> file = open_file(path, "a");
  if (!file.ok()) return file.status();
  std::unique_ptr<MetricsWriter> writer(new MetricsWriter(path, *file));
  writer->put_line(JsonLine().text("event", "resumed").integer("step", step).str());
  if (!writer->status().ok()) return writer->status();
  return writer;
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::open(const std::string& path) {
  absl::StatusOr<std::FILE*> file = open_file(path, "w");
  if (!file.ok()) return file.status();
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(path, *file));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const StepMetrics& m) { put_line(to_json(m)); }
void MetricsWriter::write(const EvalMetrics& m) { put_line(to_json(m)); }
void MetricsWriter::write(const RunSummary& m) { put_line(to_json(m)); }
void MetricsWriter::write(const StopEvent& m) { put_line(to_json(m)); }

absl::Status MetricsWriter::status() const { return status_; }

// Flushed per line so that a crash or a reader tailing the file sees whole records. Only the first error
// is kept: it is the one that explains the rest.
void MetricsWriter::put_line(const std::string& line) {
  errno = 0;
  const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  if (!ok && status_.ok()) {
    const int err = errno != 0 ? errno : EIO;
    status_ = absl::ErrnoToStatus(err, absl::StrCat("metrics: cannot write ", path_));
  }
}

}  // namespace mantissa
