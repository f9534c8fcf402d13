// Atomic replacement of a file and the checksummed header (seal) of checkpoint files.
#include "train/checkpoint_file.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <zlib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "train/checkpoint_h5.h"

namespace mantissa::checkpoint_file {
namespace {

constexpr char kMagic[] = "mantissa checkpoint\n";
constexpr char kPrefix[] = "mantissa checkpoint\nheader 1\nbytes ";

std::string header_text(uint64_t bytes, uint32_t crc) {
  std::string h = absl::StrFormat("%sheader 1\nbytes %d\ncrc32 %08x\n", kMagic, bytes, crc);
  h.resize(kHeaderBytes, '\0');
  return h;
}

std::string errno_text() { return std::strerror(errno); }

// Closes an fd on scope exit.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool read_exact(int fd, char* p, uint64_t n, uint64_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, n -= static_cast<uint64_t>(got), offset += static_cast<uint64_t>(got);
  }
  return true;
}

// CRC-32 of bytes [kHeaderBytes, size) of fd.
absl::StatusOr<uint32_t> body_crc(int fd, uint64_t size, const std::string& path) {
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t at = kHeaderBytes; at < size;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), size - at);
    if (!read_exact(fd, buf.data(), n, at)) return absl::DataLossError(path + ": read failed: " + errno_text());
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

// Parses "<digits>\n" at s[*pos] in `base` (10 or 16).
bool parse_number(const std::string& s, size_t* pos, int base, uint64_t* out) {
  const size_t end = s.find('\n', *pos);
  if (end == std::string::npos || end == *pos || end - *pos > 20) return false;
  const auto r = std::from_chars(s.data() + *pos, s.data() + end, *out, base);
  if (r.ec != std::errc() || r.ptr != s.data() + end) return false;
  *pos = end + 1;
  return true;
}

absl::Status fsync_path(const std::string& path, int flags) {
  Fd f{::open(path.c_str(), flags | O_CLOEXEC)};
  if (f.fd < 0) return os_error(path + ": cannot open to fsync", errno);
  if (::fsync(f.fd) != 0) return os_error(path + ": fsync failed", errno);
  return absl::OkStatus();
}

}  // namespace

absl::Status os_error(const std::string& what, int err) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return absl::ResourceExhaustedError(std::move(message));
    case EACCES:
    case EPERM:
    case EROFS: return absl::PermissionDeniedError(std::move(message));
    default: return absl::InternalError(std::move(message));
  }
}

absl::Status seal(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (f.fd < 0) return os_error(path + ": cannot open to seal", errno);
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < kHeaderBytes)
    return absl::InternalError(path + ": the written file is shorter than its header");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  absl::StatusOr<uint32_t> crc = body_crc(f.fd, size, path);
  if (!crc.ok()) return crc.status();
  const std::string h = header_text(size, *crc);
  const ssize_t wrote = ::pwrite(f.fd, h.data(), h.size(), 0);
  if (wrote != static_cast<ssize_t>(h.size()))
    return os_error(path + ": cannot write the header", wrote < 0 ? errno : ENOSPC);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> verify(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(path + ": no such file");
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", errno_text()));
  }
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return absl::DataLossError(absl::StrCat(path, ": cannot stat: ", errno_text()));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string h(std::min(size, kHeaderBytes), '\0');
  if (!read_exact(f.fd, h.data(), h.size(), 0)) return absl::DataLossError(path + ": read failed: " + errno_text());
  const size_t magic = sizeof(kMagic) - 1;
  if (h.compare(0, magic, kMagic) != 0) {
    if (size >= kHeaderBytes || std::string(kMagic).compare(0, h.size(), h) != 0) {
      h5::QuietErrors quiet;
      if (H5Fis_hdf5(path.c_str()) > 0)
        return absl::InvalidArgumentError(path +
                                          ": an HDF5 file but not a mantissa checkpoint (no checkpoint "
                                          "header in its first 512 bytes)");
      return absl::InvalidArgumentError(path + ": not an HDF5 file");
    }
  }
  if (size < kHeaderBytes)
    return absl::DataLossError(
        absl::StrCat(path, ": truncated: ", size, " bytes, less than its ", kHeaderBytes, "-byte header"));
  uint64_t bytes = 0, crc = 0;
  size_t pos = sizeof(kPrefix) - 1;
  const bool parsed = h.compare(0, pos, kPrefix) == 0 && parse_number(h, &pos, 10, &bytes) &&
                      h.compare(pos, 6, "crc32 ") == 0 && (pos += 6, parse_number(h, &pos, 16, &crc)) &&
                      crc <= 0xffffffffu && h == header_text(bytes, static_cast<uint32_t>(crc));
  if (!parsed) return absl::DataLossError(path + ": corrupt checkpoint header (its first 512 bytes)");
  if (size != bytes)
    return absl::DataLossError(absl::StrCat(path, ": ", size < bytes ? "truncated" : "corrupt", ": ", size,
                                            " bytes, its header says ", bytes));
  absl::StatusOr<uint32_t> got = body_crc(f.fd, size, path);
  if (!got.ok()) return got.status();
  if (*got != crc)
    return absl::DataLossError(absl::StrFormat(
        "%s: corrupt: the CRC-32 of its contents is %08x, its header says %08x (a byte changed after it was "
        "written; a checkpoint edited on purpose, e.g. with h5py, needs reseal_checkpoint)",
        path, *got, crc));
  return size;
}

absl::Status write_text(const std::string& path, std::string_view contents) {
  Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) return os_error(path + ": cannot create", errno);
  while (!contents.empty()) {
    const ssize_t n = ::write(f.fd, contents.data(), contents.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return os_error(path + ": cannot write", n < 0 ? errno : ENOSPC);
    contents.remove_prefix(static_cast<size_t>(n));
  }
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) return os_error(path + ": cannot close", errno);
  return absl::OkStatus();
}

absl::Status write_atomically(const std::string& path,
                              const std::function<absl::Status(const std::string& tmp)>& fill) {
  const std::filesystem::path target(path);
  std::filesystem::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  const std::string tmp = (dir / absl::StrCat(".", target.filename().string(), ".tmp.", ::getpid())).string();
  absl::Status st = fill(tmp);
  if (st.ok()) st = fsync_path(tmp, O_RDWR);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = os_error(absl::StrCat(path, ": cannot rename ", tmp, " over it"), errno);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename is durable once the folder is.
  return fsync_path(dir.string(), O_RDONLY | O_DIRECTORY);
}

}  // namespace mantissa::checkpoint_file
