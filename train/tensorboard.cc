// The TensorBoard writer: the events file's name and header, the run's values as tagged summaries, and
// whole-record writes.
#include "train/tensorboard.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;
using tensorboard::SummaryValue;

// A plain array, not a std::string_view: Debian's absl has a string_view of its own, which StrCat takes.
constexpr char kPrefix[] = "events.out.tfevents.";

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The largest <time> of the events files in `dir`, or -1.
int64_t latest_file_time(const fs::path& dir) {
  int64_t latest = -1;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix)) continue;
    const std::string rest = name.substr(sizeof kPrefix - 1);
    int64_t time = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &time)) latest = std::max(latest, time);
  }
  return latest;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

absl::Status errno_error(int err, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat("tensorboard: ", what, ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& dir, int64_t first_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    const std::string why = ec ? ec.message() : "it exists and is not a folder";
    return absl::FailedPreconditionError(
        absl::StrCat("tensorboard: cannot create the folder ", dir, ": ", why,
                     ". HINT: check the path (--tensorboard, TrainerConfig::tensorboard_dir) and its permissions"));
  }
  // TensorBoard reads a folder's files in name order: this one must sort after those written before it (a
  // run resumed within the same second as its checkpoint's run would otherwise tie).
  const int64_t time = std::max(static_cast<int64_t>(wall_time()), latest_file_time(dir) + 1);
  const std::string path =
      (fs::path(dir) / absl::StrCat(kPrefix, time, ".", host_name(), ".", static_cast<int64_t>(getpid()))).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error(errno, absl::StrCat("cannot create ", path));
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, fd));
  const double now = wall_time();
  writer->put_record(tensorboard::file_version_event(now));
  writer->put_record(tensorboard::session_start_event(now, first_step));
  writer->flush();
  if (!writer->status().ok()) {
    const absl::Status s = writer->status();
    writer->discard();
    return s;
  }
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  fs::remove(path_, ec);
  if (status_.ok()) status_ = absl::FailedPreconditionError(absl::StrCat("tensorboard: ", path_, " was discarded"));
}

void TensorBoardWriter::write(const StepMetrics& m) {
  std::vector<SummaryValue> values = {
      {"train/loss", static_cast<float>(m.loss)},
      {"train/lr", static_cast<float>(m.lr)},
      {"train/grad_norm", static_cast<float>(m.grad_norm)},
      {"train/samples_per_s", static_cast<float>(m.samples_per_s)},
      {"amp/loss_scale", static_cast<float>(m.scale)},
      {"amp/skipped_steps", static_cast<float>(m.skipped_steps)},
  };
  if (m.fp8_overflows) values.push_back({"fp8/overflows", static_cast<float>(*m.fp8_overflows)});
  write(m.step, values);
}

void TensorBoardWriter::write(const EvalMetrics& m) {
  std::vector<SummaryValue> values = {{"eval/loss", static_cast<float>(m.loss)}};
  if (m.accuracy) values.push_back({"eval/accuracy", static_cast<float>(*m.accuracy)});
  write(m.step, values);
}

void TensorBoardWriter::write(int64_t step, const GradientHistograms& h) {
  std::vector<SummaryValue> values = {
      {"grad/zero_fraction", static_cast<float>(h.zero_fraction)},
      {"grad/nonfinite_fraction", static_cast<float>(h.nonfinite_fraction)},
  };
  // A histogram of nothing (every grad zero or inf) is left out: TensorBoard has nothing to draw.
  if (h.log2_abs.num > 0) values.push_back({"grad/log2_abs", h.log2_abs});
  if (h.values.num > 0) values.push_back({"grad/values", h.values});
  write(step, values);
}

void TensorBoardWriter::write(int64_t step, std::span<const SummaryValue> values) {
  put_record(tensorboard::summary_event(wall_time(), step, values));
}

// One write() of the whole record: a process that dies leaves the record in the file or not at all. A write
// that stops short (disk full) is cut back off, and only the first error is kept (it explains the rest).
void TensorBoardWriter::put_record(const std::string& event) {
  if (!status_.ok() || fd_ < 0) return;
  const std::string record = tensorboard::tf_record(event);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status_ = errno_error(n < 0 ? errno : ENOSPC, absl::StrCat("cannot write ", path_));
      if (done > 0 && ::ftruncate(fd_, size_) != 0) {
        status_ = errno_error(errno, absl::StrCat("cannot cut a partial record off ", path_));
      }
      return;
    }
    done += static_cast<size_t>(n);
  }
  size_ += static_cast<int64_t>(record.size());
}

void TensorBoardWriter::flush() {
  if (!status_.ok() || fd_ < 0) return;
  if (::fsync(fd_) != 0) status_ = errno_error(errno, absl::StrCat("cannot sync ", path_));
}

}  // namespace mantissa
