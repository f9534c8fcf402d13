// The file side of checkpoints: atomic replacement (temporary file, fsync, rename, fsync of the folder) and
// the seal, a 512-byte text header in the HDF5 user block holding the file's size and the CRC-32 of
// everything after it. HDF5 ignores the user block (h5py and h5dump read the file as usual); the loader
// checks the seal before HDF5 parses a single byte, so a truncated or corrupted file is refused up front.
//   $ head -c 64 runs/a/step_400.h5
//   mantissa checkpoint
//   header 1
//   bytes 1181168
//   crc32 5f0e2a1c
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mantissa::checkpoint_file {

inline constexpr uint64_t kHeaderBytes = 512;

// `what` failed with the operating system's error `err`: "<what>: No space left on device". A full disk, a
// quota or the file-size limit (ENOSPC, EDQUOT, EFBIG) is ResourceExhausted, so callers can tell the user
// what to free; a denied permission is PermissionDenied; anything else Internal.
absl::Status os_error(const std::string& what, int err);

// Writes the header of `path`, a file created with a kHeaderBytes user block.
absl::Status seal(const std::string& path);
// Checks the header, the size and the checksum; returns the file's size. Errors: no such file, not an HDF5
// file, an HDF5 file without a header, truncated, corrupt.
absl::StatusOr<uint64_t> verify(const std::string& path);

// Writes `contents` into a new file `path` (created or truncated) and closes it; errors through os_error.
absl::Status write_text(const std::string& path, std::string_view contents);

// Writes `path` atomically: `fill` writes and closes the temporary file it is given (in the same folder,
// named .<name>.tmp.<pid>); then it is fsynced, renamed over `path`, and the folder fsynced. On any error
// the temporary file is removed and `path` is untouched.
absl::Status write_atomically(const std::string& path, const std::function<absl::Status(const std::string& tmp)>& fill);

}  // namespace mantissa::checkpoint_file
