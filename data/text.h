// Character-level text data: UTF-8 files (one file, or every file of a folder) decoded to code points, a
// vocabulary of the characters seen (saved beside a model), and a next-character dataset over blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace mantissa {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// The text of a UTF-8 file, or of every regular file in a folder (sorted by name; symlinks and strfile
// "*.dat" indices skipped) joined in order, as code points. Invalid UTF-8 is an error naming file and offset.
absl::StatusOr<std::u32string> read_utf8_text(const std::string& path);

class Vocabulary {
 public:
  Vocabulary() = default;
  static Vocabulary from_text(const std::u32string& text);  // the distinct characters, sorted by code point
  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  const std::u32string& chars() const { return chars_; }
  // Ids of `text`; a character outside the vocabulary is an error.
  absl::StatusOr<std::vector<int64_t>> encode(const std::u32string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;  // UTF-8
  // One code point per line in hex after a header line; load checks the header and every line.
  absl::Status save(const std::string& path) const;
  // The same text as a string (stored in checkpoints under /data/vocabulary); `source` names it in errors.
  std::string serialize() const;
  static absl::StatusOr<Vocabulary> parse(std::string_view text, const std::string& source);
  static absl::StatusOr<Vocabulary> load(const std::string& path);

 private:
  std::u32string chars_;
  absl::flat_hash_map<char32_t, int64_t> ids_;
};

// Example i: {x = ids[i, i + block), y = ids[i + 1, i + block + 1)}, both i64 [block].
class CharDataset final : public Dataset {
 public:
  CharDataset(std::vector<int64_t> ids, int64_t block_size);
  int64_t size() const override;
  Example get(int64_t index) const override;
  Example get_batch(std::span<const int64_t> indices) const override;
  int64_t block_size() const { return block_size_; }

 private:
  std::vector<int64_t> ids_;
  int64_t block_size_;
};

struct TextOptions {
  std::string path = kFortunesDir;
  int64_t block_size = 128;
  double val_fraction = 0.1;  // the last part of the text is the validation set
};

struct TextData {
  Vocabulary vocab;
  std::shared_ptr<CharDataset> train, val;
};

absl::StatusOr<TextData> load_text(const TextOptions& options = {});

std::string utf8_encode(const std::u32string& text);

}  // namespace mantissa
