// UTF-8 decoding with validation, the character vocabulary and its file format, and the block dataset.
#include "data/text.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/error.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;
constexpr const char* kVocabHeader = "mantissa-vocabulary v1";

absl::Status decode_utf8(const std::string& bytes, const std::string& path, std::u32string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + static_cast<size_t>(len) <= bytes.size();
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(bytes[i + static_cast<size_t>(k)]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    ok = ok && !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) && !(len == 4 && cp < 0x10000) &&
         !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
    if (!ok) return absl::InvalidArgumentError(absl::StrCat(path, ": invalid UTF-8 at byte ", i));
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return absl::OkStatus();
}

absl::Status read_file(const std::string& path, std::u32string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing file or no permission)"));
  std::stringstream ss;
  ss << in.rdbuf();
  return decode_utf8(ss.str(), path, out);
}

}  // namespace

std::string utf8_encode(const std::u32string& text) {
  std::string out;
  for (char32_t c : text) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

absl::StatusOr<std::u32string> read_utf8_text(const std::string& path) {
  std::error_code ec;
  std::u32string text;
  if (!fs::is_directory(path, ec)) {
    if (auto s = read_file(path, text); !s.ok()) return s;
    return text;
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (entry.is_symlink() || !entry.is_regular_file() || entry.path().extension() == ".dat") continue;
    files.push_back(entry.path().string());
  }
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": cannot list the folder: ", ec.message()));
  if (files.empty()) return absl::NotFoundError(absl::StrCat(path, ": the folder holds no text files"));
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    if (auto s = read_file(f, text); !s.ok()) return s;
  }
  return text;
}

Vocabulary Vocabulary::from_text(const std::u32string& text) {
  Vocabulary v;
  v.chars_ = text;
  std::sort(v.chars_.begin(), v.chars_.end());
  v.chars_.erase(std::unique(v.chars_.begin(), v.chars_.end()), v.chars_.end());
  for (size_t i = 0; i < v.chars_.size(); ++i) v.ids_[v.chars_[i]] = static_cast<int64_t>(i);
  return v;
}

absl::StatusOr<std::vector<int64_t>> Vocabulary::encode(const std::u32string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    auto it = ids_.find(text[i]);
    if (it == ids_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("Vocabulary::encode: character U+", absl::Hex(text[i]),
                                                     " at position ", i, " is not in the vocabulary"));
    }
    ids.push_back(it->second);
  }
  return ids;
}

std::string Vocabulary::decode(const std::vector<int64_t>& ids) const {
  std::u32string text;
  for (int64_t id : ids) {
    MT_CHECK(id >= 0 && id < size(), "Vocabulary::decode: id ", id, " out of range for ", size(), " characters");
    text.push_back(chars_[static_cast<size_t>(id)]);
  }
  return utf8_encode(text);
}

std::string Vocabulary::serialize() const {
  std::string out = absl::StrCat(kVocabHeader, "\n");
  for (char32_t c : chars_) absl::StrAppend(&out, absl::Hex(c), "\n");
  return out;
}

absl::StatusOr<Vocabulary> Vocabulary::parse(std::string_view text, const std::string& source) {
  std::vector<absl::string_view> lines = absl::StrSplit(absl::string_view(text.data(), text.size()), '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty() || lines[0] != kVocabHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a vocabulary file (first line must be \"", kVocabHeader, "\")"));
  }
  std::u32string chars;
  for (size_t n = 1; n < lines.size(); ++n) {
    uint32_t cp = 0;
    if (!absl::SimpleHexAtoi(lines[n], &cp) || cp > 0x10FFFF || (!chars.empty() && cp <= chars.back())) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": line ", n + 1, " \"", lines[n], "\" is not a hex code point above the previous one"));
    }
    chars.push_back(cp);
  }
  return from_text(chars);
}

absl::Status Vocabulary::save(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  out << serialize();
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write the vocabulary"));
  return absl::OkStatus();
}

absl::StatusOr<Vocabulary> Vocabulary::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing file or no permission)"));
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

CharDataset::CharDataset(std::vector<int64_t> ids, int64_t block_size) : ids_(std::move(ids)), block_size_(block_size) {
  MT_CHECK(block_size_ >= 1, "CharDataset: block_size must be >= 1, got ", block_size_);
}

int64_t CharDataset::size() const { return std::max<int64_t>(0, static_cast<int64_t>(ids_.size()) - block_size_); }

Example CharDataset::get(int64_t index) const {
  const std::vector<int64_t> one{index};
  Example b = get_batch(one);
  return {b[0].select(0, 0), b[1].select(0, 0)};
}

Example CharDataset::get_batch(std::span<const int64_t> indices) const {
  const auto n = static_cast<int64_t>(indices.size());
  Tensor x = empty({n, block_size_}, {.dtype = DType::kI64});
  Tensor y = empty({n, block_size_}, {.dtype = DType::kI64});
  const auto bytes = static_cast<size_t>(block_size_) * sizeof(int64_t);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = indices[static_cast<size_t>(r)];
    MT_CHECK(i >= 0 && i < size(), "CharDataset: index ", i, " out of range for ", size(), " examples");
    std::memcpy(x.data<int64_t>() + r * block_size_, ids_.data() + i, bytes);
    std::memcpy(y.data<int64_t>() + r * block_size_, ids_.data() + i + 1, bytes);
  }
  return {x, y};
}

absl::StatusOr<TextData> load_text(const TextOptions& options) {
  if (options.val_fraction < 0 || options.val_fraction >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("load_text: val_fraction must be in [0, 1), got ", options.val_fraction));
  }
  auto text = read_utf8_text(options.path);
  if (!text.ok()) return text.status();
  const auto n = static_cast<int64_t>(text->size());
  const auto n_val = static_cast<int64_t>(static_cast<double>(n) * options.val_fraction);
  if (n - n_val <= options.block_size || (n_val > 0 && n_val <= options.block_size)) {
    return absl::InvalidArgumentError(absl::StrCat(options.path, ": ", n, " characters are too few for block_size ",
                                                   options.block_size, " with val_fraction ", options.val_fraction));
  }
  TextData data{.vocab = Vocabulary::from_text(*text)};
  auto ids = data.vocab.encode(*text);
  if (!ids.ok()) return ids.status();
  data.train =
      std::make_shared<CharDataset>(std::vector<int64_t>(ids->begin(), ids->end() - n_val), options.block_size);
  data.val = std::make_shared<CharDataset>(std::vector<int64_t>(ids->end() - n_val, ids->end()), options.block_size);
  return data;
}

}  // namespace mantissa
