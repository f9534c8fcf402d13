// IDX reader: the installed Fashion-MNIST files, and each kind of malformed file written by the test.
#include "data/idx.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>
#include <zlib.h>

namespace mantissa {
namespace {

namespace fs = std::filesystem;

std::vector<unsigned char> be32(uint32_t v) {
  return {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 8),
          static_cast<unsigned char>(v)};
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mantissa_idx_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a gzipped file of header words then payload bytes.
  std::string write(const std::string& name, const std::vector<uint32_t>& header,
                    const std::vector<unsigned char>& payload) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    for (uint32_t w : header) {
      auto b = be32(w);
      gzwrite(f, b.data(), 4);
    }
    if (!payload.empty()) gzwrite(f, payload.data(), static_cast<unsigned>(payload.size()));
    gzclose(f);
    return path;
  }
  fs::path dir_;
};

TEST(IdxRealData, FashionMnistTrainAndTest) {
  for (auto [split, n] : {std::pair{MnistSplit::kTrain, 60000}, std::pair{MnistSplit::kTest, 10000}}) {
    auto data = read_mnist(split);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->images.shape(), (Shape{n, 1, 28, 28}));
    EXPECT_EQ(data->images.dtype(), DType::kF32);
    EXPECT_EQ(data->labels.shape(), (Shape{n}));
    EXPECT_EQ(data->labels.dtype(), DType::kI64);
    const float* px = data->images.data<float>();
    float lo = 1, hi = 0;
    for (int64_t i = 0; i < data->images.numel(); ++i) lo = std::min(lo, px[i]), hi = std::max(hi, px[i]);
    EXPECT_EQ(lo, 0.0f);
    EXPECT_EQ(hi, 1.0f);  // 255 / 255 exactly
    std::vector<int64_t> counts(10, 0);
    const int64_t* lab = data->labels.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_GE(lab[i], 0);
      ASSERT_LE(lab[i], 9);
      ++counts[static_cast<size_t>(lab[i])];
    }
    for (int64_t c : counts) EXPECT_EQ(c, n / 10);  // Fashion-MNIST is exactly balanced
  }
}

TEST(IdxRealData, NormalizedUsesMeanAndStd) {
  auto unit = read_mnist(MnistSplit::kTest);
  auto norm = read_mnist(MnistSplit::kTest, {.scaling = PixelScaling::kNormalized, .mean = 0.5, .stddev = 0.25});
  ASSERT_TRUE(unit.ok() && norm.ok());
  for (int64_t i : {0, 100, 5000}) {
    // Same float ops as the reader: (x - 0.5) * 4 is exact for these operands.
    EXPECT_EQ(norm->images.data<float>()[i], (unit->images.data<float>()[i] - 0.5f) * 4.0f);
  }
}

TEST_F(IdxTest, SmallValidFiles) {
  auto img = write("i.gz", {0x803, 2, 2, 3}, {0, 255, 51, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto images = read_idx_images(img);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->shape(), (Shape{2, 1, 2, 3}));
  EXPECT_EQ(images->data<float>()[1], 1.0f);
  EXPECT_EQ(images->data<float>()[2], 51.0f / 255.0f);
  auto lab = write("l.gz", {0x801, 3}, {7, 0, 9});
  auto labels = read_idx_labels(lab);
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->data<int64_t>()[0], 7);
  EXPECT_EQ(labels->data<int64_t>()[2], 9);
}

TEST_F(IdxTest, MissingFile) {
  const std::string path = (dir_ / "nope.gz").string();
  auto r = read_idx_images(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
  auto m = read_mnist(MnistSplit::kTrain, {.dir = dir_.string()});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("train-images-idx3-ubyte.gz"), std::string::npos) << m.status();
}

TEST_F(IdxTest, BadMagic) {
  auto path = write("bad.gz", {0x801, 1, 1, 1}, {0});  // a labels magic in an images file
  auto r = read_idx_images(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad magic number 0x00000801"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find(path), std::string::npos);
}

TEST_F(IdxTest, WrongDims) {
  auto r = read_idx_images(write("d.gz", {0x803, 1, 0, 28}, {}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("wrong image dimensions 0x28"), std::string::npos) << r.status();
  // Header promises fewer images than the file holds.
  auto t = read_idx_images(write("t.gz", {0x803, 1, 1, 2}, {1, 2, 3, 4}));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("past the length"), std::string::npos) << t.status();
}

TEST_F(IdxTest, Truncated) {
  auto r = read_idx_images(write("p.gz", {0x803, 2, 2, 2}, {1, 2, 3, 4, 5}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("truncated: the pixels needs 8 bytes, file ends after 5"), std::string::npos)
      << r.status();
  auto h = read_idx_labels(write("h.gz", {0x801}, {}));  // header cut short
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("truncated: the header"), std::string::npos) << h.status();
}

TEST_F(IdxTest, CountMismatch) {
  write("train-images-idx3-ubyte.gz", {0x803, 2, 1, 1}, {1, 2});
  write("train-labels-idx1-ubyte.gz", {0x801, 3}, {0, 1, 2});
  auto r = read_mnist(MnistSplit::kTrain, {.dir = dir_.string()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has 2 images but"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("has 3 labels"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace mantissa
