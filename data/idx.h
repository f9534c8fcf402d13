// IDX reader for (Fashion-)MNIST: gzipped idx3 image and idx1 label files read through zlib, validated
// (magic number, dimensions, lengths, matching counts), returned as f32 [N, 1, H, W] images and i64 [N] labels.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace mantissa {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

enum class MnistSplit { kTrain, kTest };
enum class PixelScaling { kUnit, kNormalized };  // [0, 1], or (x - mean) / std with the given statistics

struct MnistOptions {
  std::string dir = kFashionMnistDir;
  PixelScaling scaling = PixelScaling::kUnit;
  double mean = 0.2860;  // Fashion-MNIST training-set pixel mean and std (of values in [0, 1])
  double stddev = 0.3530;
};

struct MnistData {
  Tensor images;  // f32 [N, 1, rows, cols]
  Tensor labels;  // i64 [N]
};

// Images of an idx3 file (gzipped or plain: zlib reads both) as f32 [N, 1, rows, cols] in [0, 1].
absl::StatusOr<Tensor> read_idx_images(const std::string& path);
// Labels of an idx1 file as i64 [N].
absl::StatusOr<Tensor> read_idx_labels(const std::string& path);
// Both files of a split (train-*-ubyte.gz or t10k-*-ubyte.gz in options.dir), counts checked to agree.
absl::StatusOr<MnistData> read_mnist(MnistSplit split, const MnistOptions& options = {});

}  // namespace mantissa
