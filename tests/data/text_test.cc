// Character-level text: UTF-8 validation, the fortunes corpus, vocabulary save/load, blocks and the split.
#include "data/text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace mantissa {
namespace {

namespace fs = std::filesystem;

class TextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mantissa_text_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(TextTest, FolderJoinsFilesInOrderSkippingDatAndSymlinks) {
  write("b", "wörld");
  write("a", "hi ");
  write("a.dat", "\xff\xfe");  // a strfile index: binary, skipped
  fs::create_symlink(dir_ / "a", dir_ / "a.u8");
  auto text = read_utf8_text(dir_.string());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(utf8_encode(*text), "hi wörld");
  EXPECT_EQ(text->size(), 8u);  // ö is one code point
}

TEST_F(TextTest, InvalidUtf8AndMissingFileNameTheFile) {
  const std::string bad = write("bad", "ok\xC3(");
  auto r = read_utf8_text(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), bad + ": invalid UTF-8 at byte 2");
  auto overlong = read_utf8_text(write("overlong", "\xC0\xAF"));
  EXPECT_FALSE(overlong.ok());
  auto missing = read_utf8_text((dir_ / "none").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TextTest, VocabularyRoundTripsThroughAFile) {
  const std::u32string text = U"bañana €😀";
  Vocabulary v = Vocabulary::from_text(text);
  EXPECT_EQ(v.size(), 7);  // b a ñ n space € 😀
  auto ids = v.encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(v.decode(*ids), utf8_encode(text));
  const std::string path = (dir_ / "vocab.txt").string();
  ASSERT_TRUE(v.save(path).ok());
  auto loaded = Vocabulary::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->chars(), v.chars());
  EXPECT_EQ(*loaded->encode(text), *ids);
  EXPECT_FALSE(v.encode(U"z").ok());
  auto parsed = Vocabulary::parse(v.serialize(), "checkpoint /data/vocabulary");  // as checkpoints store it
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->chars(), v.chars());
  auto bad = Vocabulary::parse(v.serialize() + "zz\n", "ckpt.h5 /data/vocabulary");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ckpt.h5 /data/vocabulary: line 9 \"zz\""), std::string::npos) << bad.status();
  auto junk = Vocabulary::load(write("junk", "hello\n"));
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("not a vocabulary file"), std::string::npos);
}

TEST_F(TextTest, BlocksShiftTargetsByOneAndSplitAtTheEnd) {
  write("t", "abcdefghijklmnopqrst");  // 20 chars
  auto data = load_text({.path = (dir_ / "t").string(), .block_size = 3, .val_fraction = 0.25});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train->size(), 15 - 3);
  EXPECT_EQ(data->val->size(), 5 - 3);
  Example e = data->train->get(2);
  EXPECT_EQ(data->vocab.decode({e[0].data<int64_t>(), e[0].data<int64_t>() + 3}), "cde");
  EXPECT_EQ(data->vocab.decode({e[1].data<int64_t>(), e[1].data<int64_t>() + 3}), "def");
  Example v = data->val->get(0);
  EXPECT_EQ(data->vocab.decode({v[0].data<int64_t>(), v[0].data<int64_t>() + 3}), "pqr");
  EXPECT_FALSE(load_text({.path = (dir_ / "t").string(), .block_size = 30}).ok());
}

TEST(TextCorpus, FortunesLoads) {
  auto data = load_text();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_GT(data->train->size(), 1'000'000);  // about 2.7 MB of text
  EXPECT_GT(data->vocab.size(), 90);          // printable ASCII plus some
  EXPECT_LT(data->vocab.size(), 1000);
  Example b = data->train->get_batch(std::vector<int64_t>{0, 5});
  EXPECT_EQ(b[0].shape(), (Shape{2, 128}));
}

}  // namespace
}  // namespace mantissa
