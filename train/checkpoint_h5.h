// Checked HDF5 access for checkpoints (train/checkpoint.cc): owning ids, a guard that silences HDF5's
// error printing, and a writer and a reader whose every failure is an absl::Status naming the file and
// the object ("<file>: /optimizer/groups/0 has no attribute 'lr'"). Internal to train/.
#pragma once

#include <cstdint>
#include <hdf5.h>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/tensor.h"

// Status plumbing for the checkpoint code: return the error of `expr`, or assign its value to `lhs`.
// CK_ASSIGN_OR_RETURN declares `lhs` in the caller's scope, so it cannot be wrapped in do/while.
#define CK_RETURN_IF_ERROR(expr)             \
  do {                                       \
    absl::Status ck_status_ = (expr);        \
    if (!ck_status_.ok()) return ck_status_; \
  } while (0)
#define CK_CONCAT_INNER(a, b) a##b
#define CK_CONCAT(a, b) CK_CONCAT_INNER(a, b)
#define CK_ASSIGN_OR_RETURN(lhs, expr) CK_ASSIGN_OR_RETURN_IMPL(CK_CONCAT(ck_or_, __LINE__), lhs, expr)
#define CK_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(*tmp)

namespace mantissa::h5 {

// An HDF5 id closed by its close function when it goes out of scope.
class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; false when HDF5 reports a failure (e.g. a file whose last write did not reach the disk).
  bool reset() {
    bool ok = true;
    if (id_ >= 0 && close_ != nullptr) ok = close_(id_) >= 0;
    id_ = H5I_INVALID_HID;
    return ok;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

// While alive, HDF5 prints nothing on errors (they become Statuses); restores the previous handler.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The innermost message on HDF5's error stack ("" when empty), e.g. "unable to open file".
std::string last_error();
// The operating system's error behind the last HDF5 failure when its file driver reported one (the sec2
// driver's message carries "errno = 28"), else 0.
int last_os_error();
// A failed HDF5 write as a status. With an OS error behind it: checkpoint_file::os_error (e.g. "<what>: No
// space left on device", ResourceExhausted), not HDF5's raw driver message with its byte counts; without:
// Internal, "<what> (HDF5: <innermost message>)".
absl::Status write_error(const std::string& what);

// An open group or the file root with its path inside the file ("/", "/optimizer/groups/0").
struct Obj {
  Id id;
  std::string path;
  std::string child(const std::string& name) const { return path == "/" ? "/" + name : path + "/" + name; }
};

class Writer {
 public:
  explicit Writer(std::string file) : file_(std::move(file)) {}
  // A new group `name` under `parent`; `ordered` tracks link creation order (readers list in that order).
  absl::StatusOr<Obj> group(const Obj& parent, const std::string& name, bool ordered = false) const;
  absl::Status attr_i64(const Obj& o, const std::string& name, int64_t v) const;
  absl::Status attr_u64(const Obj& o, const std::string& name, uint64_t v) const;
  absl::Status attr_u32(const Obj& o, const std::string& name, uint32_t v) const;
  absl::Status attr_f64(const Obj& o, const std::string& name, double v) const;
  absl::Status attr_string(const Obj& o, const std::string& name, const std::string& v) const;
  // f32/f64/i64/i32 as HDF5 numbers; f16/bf16 as u16 and bool as u8 with a string attribute "dtype".
  absl::Status tensor(const Obj& o, const std::string& name, const Tensor& t) const;
  // A scalar fixed-length string holding `v`'s bytes, with attribute "bytes" (its exact length).
  absl::Status text(const Obj& o, const std::string& name, const std::string& v) const;
  // A 1-D dataset of fixed-length (the longest), NUL-padded UTF-8 strings. Not variable-length ones: their
  // global heap is where HDF5 1.10 crashes on damaged files instead of reporting an error.
  absl::Status strings(const Obj& o, const std::string& name, const std::vector<std::string>& v) const;
  absl::Status f64s(const Obj& o, const std::string& name, const std::vector<double>& v) const;

 private:
  absl::Status fail(const Obj& o, const std::string& name, const std::string& what) const;
  absl::Status attr(const Obj& o, const std::string& name, hid_t file_type, hid_t mem_type, const void* v) const;
  std::string file_;
};

class Reader {
 public:
  // `file_size` bounds every size read from the file before anything is allocated.
  Reader(std::string file, uint64_t file_size) : file_(std::move(file)), file_size_(file_size) {}
  absl::Status error(const std::string& object, const std::string& what) const;
  const std::string& file() const { return file_; }

  absl::StatusOr<Obj> group(const Obj& parent, const std::string& name) const;
  bool has(const Obj& parent, const std::string& name) const;
  bool is_group(const Obj& parent, const std::string& name) const;  // a hard link to a group
  bool has_attr(const Obj& o, const std::string& name) const;
  // Member names in creation order when the group tracks it, else by name.
  absl::StatusOr<std::vector<std::string>> members(const Obj& o) const;
  absl::StatusOr<std::vector<std::string>> attr_names(const Obj& o) const;
  absl::StatusOr<int64_t> attr_i64(const Obj& o, const std::string& name) const;
  absl::StatusOr<uint64_t> attr_u64(const Obj& o, const std::string& name) const;
  absl::StatusOr<double> attr_f64(const Obj& o, const std::string& name) const;
  absl::StatusOr<std::string> attr_string(const Obj& o, const std::string& name) const;
  absl::StatusOr<Tensor> tensor(const Obj& o, const std::string& name) const;
  absl::StatusOr<std::string> text(const Obj& o, const std::string& name) const;
  absl::StatusOr<std::vector<std::string>> strings(const Obj& o, const std::string& name) const;
  absl::StatusOr<std::vector<double>> f64s(const Obj& o, const std::string& name) const;

 private:
  struct Opened {
    Id dataset, space, type;
    Shape shape;
    int64_t numel = 0;
  };
  absl::StatusOr<Opened> open_dataset(const Obj& o, const std::string& name) const;
  absl::StatusOr<Id> open_attr(const Obj& o, const std::string& name, H5T_class_t cls) const;
  absl::StatusOr<std::string> read_fixed_string(hid_t attr_or_dataset, hid_t type, bool is_attr,
                                                const std::string& what) const;
  std::string file_;
  uint64_t file_size_;
};

}  // namespace mantissa::h5
