// options_from_json: the config JSON (run_flags.h's to_json) read back. Each value becomes the flag text that
// sets it and goes through set_flag, so the JSON and the command line accept the same values.
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "train/run_flags.h"

namespace mantissa {
namespace {

// The readers below take what they read off the front of `s` (after spaces), or return none and leave the
// rest unspecified. They read what to_json writes: one flat object whose values are strings, numbers, null and
// lists of integers.

void skip_spaces(std::string_view& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
}

bool take(std::string_view& s, char c) {
  skip_spaces(s);
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

// A string literal, unescaped. to_json escapes '"', '\' and control characters (as \u00XX); UTF-8 passes as is.
std::optional<std::string> take_string(std::string_view& s) {
  if (!take(s, '"')) return std::nullopt;
  std::string out;
  while (!s.empty() && s.front() != '"') {
    char c = s.front();
    s.remove_prefix(1);
    if (c == '\\') {
      if (s.empty()) return std::nullopt;
      c = s.front();
      s.remove_prefix(1);
      if (c == 'u') {
        uint32_t code = 0;
        const std::string hex(s.substr(0, 4));
        if (hex.size() < 4 || !absl::SimpleHexAtoi(hex, &code) || code >= 0x80) return std::nullopt;
        s.remove_prefix(4);
        c = static_cast<char>(code);
      } else if (c == 'n') {
        c = '\n';
      } else if (c == 't') {
        c = '\t';
      } else if (c != '"' && c != '\\' && c != '/') {
        return std::nullopt;
      }
    }
    out += c;
  }
  if (!take(s, '"')) return std::nullopt;
  return out;
}

// A value as flag text: a string's contents, a number as written, null as "" (none), [16, 8] as "16,8".
std::optional<std::string> take_value(std::string_view& s) {
  skip_spaces(s);
  if (!s.empty() && s.front() == '"') return take_string(s);
  const bool list = take(s, '[');
  const size_t end = std::min(s.find_first_of(list ? "]" : ",} \t\r\n"), s.size());
  if (end == 0 && !list) return std::nullopt;
  std::string text;
  for (char c : s.substr(0, end)) {
    if (c != ' ') text += c;
  }
  s.remove_prefix(end);
  if (list && !take(s, ']')) return std::nullopt;
  if (text == "null") return "";
  return text;
}

bool recorded(std::string_view name) {
  for (const FlagInfo& f : flag_infos()) {
    if (f.name == name) return f.in_config == InConfig::kYes;
  }
  return false;
}

absl::Status bad(absl::string_view why) { return absl::InvalidArgumentError(absl::StrCat("config JSON: ", why)); }

}  // namespace

absl::StatusOr<RunOptions> options_from_json(std::string_view json) {
  RunOptions o;
  std::string_view s = json;
  if (!take(s, '{')) return bad("expected an object");
  if (!take(s, '}')) {
    do {
      const std::optional<std::string> key = take_string(s);
      if (!key || !take(s, ':')) return bad("expected \"key\": value");
      const std::optional<std::string> value = take_value(s);
      if (!value) return bad(absl::StrCat("\"", *key, "\": expected a string, a number, null or a list"));
      if (!recorded(*key)) return bad(absl::StrCat("\"", *key, "\" is not a flag the config records"));
      if (absl::Status st = set_flag(o, *key, *value); !st.ok()) return bad(st.message());
    } while (take(s, ','));
    if (!take(s, '}')) return bad("expected ',' or '}' after a value");
  }
  skip_spaces(s);
  if (!s.empty()) return bad("text after the object");
  return o;
}

}  // namespace mantissa
