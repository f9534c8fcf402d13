// JSON text for the profiler's table and trace writers: a string literal with the escapes JSON requires.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace mantissa::profiler {

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace mantissa::profiler
