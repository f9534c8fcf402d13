// libFuzzer target: the input bytes as a checkpoint file through load_checkpoint, which must return an
// error or a checkpoint and never crash. Built with -DMANTISSA_FUZZ=ON under clang (tests/README.md).
// Inputs shorter than the seal are sealed as they are; others get a fresh seal with probability 1/2 (the
// first input byte decides), so the fuzzer also reaches HDF5 and the structural checks behind the seal.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <unistd.h>

#include "train/checkpoint.h"
#include "train/checkpoint_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/mantissa_checkpoint_fuzz." + std::to_string(::getpid()) + ".h5";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  if (size > mantissa::checkpoint_file::kHeaderBytes && (data[0] & 1) == 0) (void)mantissa::checkpoint_file::seal(path);
  const absl::StatusOr<mantissa::Checkpoint> c = mantissa::load_checkpoint(path);
  if (!c.ok() && c.status().message().rfind(path + ": ", 0) != 0) __builtin_trap();  // errors name the file
  return 0;
}
