// Reads the PyTorch reference files in tests/golden/ (HDF5) for tests: datasets as flat vectors with
// their shape, or as tensors; scalar attributes. Every failure throws with the file and path named.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace mantissa::testing {

// tests/golden of the source tree, or $MANTISSA_GOLDEN_DIR when set (a test binary run elsewhere), and
// the absolute path of a file in it.
std::string golden_dir();
std::string golden_path(const std::string& file);

class GoldenFile {
 public:
  explicit GoldenFile(const std::string& file);  // a name in tests/golden/, e.g. "ops.h5"
  ~GoldenFile();
  GoldenFile(const GoldenFile&) = delete;
  GoldenFile& operator=(const GoldenFile&) = delete;

  bool has(const std::string& path) const;  // dataset, group or attribute-free path
  Shape shape(const std::string& dataset) const;
  std::vector<double> f64(const std::string& dataset) const;  // converted by HDF5 from any numeric type
  std::vector<float> f32(const std::string& dataset) const;
  std::vector<int64_t> i64(const std::string& dataset) const;
  std::vector<uint16_t> u16(const std::string& dataset) const;
  std::vector<uint8_t> u8(const std::string& dataset) const;    // bit patterns (FP8)
  std::vector<uint32_t> u32(const std::string& dataset) const;  // bit patterns (f32 stored as its bits)
  // The dataset as a tensor of `dtype` (values converted through f64, or i64 for integer dtypes).
  Tensor tensor(const std::string& dataset, DType dtype = DType::kF64) const;
  // Names of the members of a group ("/" for the root), sorted.
  std::vector<std::string> members(const std::string& group) const;
  // Scalar attributes of an object (group or dataset).
  double attr_f64(const std::string& object, const std::string& name) const;
  int64_t attr_i64(const std::string& object, const std::string& name) const;
  std::string attr_str(const std::string& object, const std::string& name) const;
  bool has_attr(const std::string& object, const std::string& name) const;
  std::vector<int64_t> attr_i64_vector(const std::string& object, const std::string& name) const;
  std::vector<double> attr_f64_vector(const std::string& object, const std::string& name) const;

 private:
  std::string name_;
  int64_t file_;  // hid_t
};

}  // namespace mantissa::testing
