// IDX (MNIST format) reading through zlib's gz interface, with every malformation reported as a Status.
#include "data/idx.h"

#include <cstdint>
#include <memory>
#include <vector>
#include <zlib.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mantissa {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dims
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dim

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

absl::StatusOr<GzFile> open_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing file or no permission)"));
  }
  return GzFile(f);
}

// Reads exactly n bytes; anything shorter (or a zlib error) is a truncated/corrupt file.
absl::Status read_exact(gzFile f, const std::string& path, void* dst, size_t n, const char* what) {
  auto* out = static_cast<unsigned char*>(dst);
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(f, out + done, chunk);
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      return absl::DataLossError(absl::StrCat(path, ": corrupt compressed data while reading ", what, ": ", msg));
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat(path, ": truncated: ", what, " needs ", n, " bytes, file ends after ", done));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> read_header(gzFile f, const std::string& path, uint32_t magic, int ndims) {
  std::vector<unsigned char> raw(4 * static_cast<size_t>(ndims + 1));
  if (auto s = read_exact(f, path, raw.data(), raw.size(), "the header"); !s.ok()) return s;
  std::vector<uint32_t> words(static_cast<size_t>(ndims + 1));
  for (size_t i = 0; i < words.size(); ++i) {  // big-endian
    words[i] = (uint32_t{raw[4 * i]} << 24) | (uint32_t{raw[4 * i + 1]} << 16) | (uint32_t{raw[4 * i + 2]} << 8) |
               uint32_t{raw[4 * i + 3]};
  }
  if (words[0] != magic) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad magic number 0x", absl::Hex(words[0], absl::kZeroPad8),
                                                   ", expected 0x", absl::Hex(magic, absl::kZeroPad8), " (",
                                                   ndims == 3 ? "idx3 images" : "idx1 labels", ")"));
  }
  return std::vector<uint32_t>(words.begin() + 1, words.end());
}

// After the payload the file must end: trailing bytes mean the header's dimensions are wrong.
absl::Status expect_end(gzFile f, const std::string& path) {
  unsigned char extra = 0;
  if (gzread(f, &extra, 1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": data continues past the length the header gives"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> read_idx_images(const std::string& path) {
  auto file = open_gz(path);
  if (!file.ok()) return file.status();
  auto dims = read_header(file->get(), path, kImagesMagic, 3);
  if (!dims.ok()) return dims.status();
  const uint32_t n = (*dims)[0], rows = (*dims)[1], cols = (*dims)[2];
  if (rows == 0 || cols == 0 || rows > 4096 || cols > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": wrong image dimensions ", rows, "x", cols, " (expected 1..4096 each, e.g. 28x28)"));
  }
  const size_t pixels = size_t{n} * rows * cols;
  std::vector<unsigned char> raw(pixels);
  if (auto s = read_exact(file->get(), path, raw.data(), pixels, "the pixels"); !s.ok()) return s;
  if (auto s = expect_end(file->get(), path); !s.ok()) return s;
  Tensor images = empty({int64_t{n}, 1, int64_t{rows}, int64_t{cols}}, {.dtype = DType::kF32});
  float* dst = images.data<float>();
  for (size_t i = 0; i < pixels; ++i) dst[i] = static_cast<float>(raw[i]) / 255.0f;
  return images;
}

absl::StatusOr<Tensor> read_idx_labels(const std::string& path) {
  auto file = open_gz(path);
  if (!file.ok()) return file.status();
  auto dims = read_header(file->get(), path, kLabelsMagic, 1);
  if (!dims.ok()) return dims.status();
  const uint32_t n = (*dims)[0];
  std::vector<unsigned char> raw(n);
  if (auto s = read_exact(file->get(), path, raw.data(), n, "the labels"); !s.ok()) return s;
  if (auto s = expect_end(file->get(), path); !s.ok()) return s;
  Tensor labels = empty({int64_t{n}}, {.dtype = DType::kI64});
  int64_t* dst = labels.data<int64_t>();
  for (size_t i = 0; i < n; ++i) dst[i] = raw[i];
  return labels;
}

absl::StatusOr<MnistData> read_mnist(MnistSplit split, const MnistOptions& options) {
  const std::string prefix = absl::StrCat(options.dir, "/", split == MnistSplit::kTrain ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  auto images = read_idx_images(images_path);
  if (!images.ok()) return images.status();
  auto labels = read_idx_labels(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->size(0) != labels->size(0)) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, " has ", images->size(0), " images but ", labels_path,
                                                   " has ", labels->size(0), " labels"));
  }
  if (options.scaling == PixelScaling::kNormalized) {
    if (options.stddev <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("read_mnist: stddev must be > 0, got ", options.stddev));
    }
    float* p = images->data<float>();
    const float mean = static_cast<float>(options.mean), inv = static_cast<float>(1.0 / options.stddev);
    for (int64_t i = 0; i < images->numel(); ++i) p[i] = (p[i] - mean) * inv;
  }
  return MnistData{.images = *std::move(images), .labels = *std::move(labels)};
}

}  // namespace mantissa
