// A reader of TensorBoard event files for the tests, written apart from the writer (train/tensorboard*.h):
// its CRC32C is the bit-at-a-time definition, not the writer's table, and its protobuf decoder reads any
// field of any wire type. It checks both masked CRCs of every record, decodes the Event fields the writer
// uses, and applies TensorBoard's rules for a restarted run's files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "train/tensorboard_record.h"

namespace mantissa::testing_tb {

inline uint32_t reference_crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (char c : data) {
    crc ^= static_cast<uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
inline uint32_t reference_masked_crc(std::string_view data) {
  const uint32_t crc = reference_crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

inline uint64_t little_endian(std::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes.size(); ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return v;
}

// The records of a file's bytes; `error` names the first problem (a bad length or data CRC, a record cut
// short) and the byte it is at, and the records before it are kept.
struct Records {
  std::vector<std::string> data;
  std::string error;
};
inline Records read_records(std::string_view file) {
  Records out;
  size_t at = 0;
  while (at < file.size()) {
    const std::string where = " at byte " + std::to_string(at);
    if (file.size() - at < 12) return out.error = "a length cut short" + where, out;
    const std::string_view length_bytes = file.substr(at, 8);
    if (reference_masked_crc(length_bytes) != little_endian(file.substr(at + 8, 4))) {
      return out.error = "a bad length CRC" + where, out;
    }
    const uint64_t length = little_endian(length_bytes);
    if (file.size() - at - 12 < length + 4) return out.error = "data cut short" + where, out;
    const std::string_view data = file.substr(at + 12, length);
    if (reference_masked_crc(data) != little_endian(file.substr(at + 12 + length, 4))) {
      return out.error = "a bad data CRC" + where, out;
    }
    out.data.emplace_back(data);
    at += 16 + length;
  }
  return out;
}

// One protobuf field: its number and wire type, and the varint/fixed bits or the length-delimited bytes.
struct Field {
  uint32_t number = 0;
  uint32_t type = 0;
  uint64_t bits = 0;
  std::string_view bytes;
};
inline bool read_varint(std::string_view& in, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}
// Every field of a message; a malformed one fails the test.
inline std::vector<Field> fields(std::string_view in) {
  std::vector<Field> out;
  while (!in.empty()) {
    uint64_t key = 0;
    Field f;
    bool ok = read_varint(in, key);
    f.number = static_cast<uint32_t>(key >> 3);
    f.type = static_cast<uint32_t>(key & 7);
    if (ok && f.type == 0) {
      ok = read_varint(in, f.bits);
    } else if (ok && (f.type == 1 || f.type == 5)) {
      const size_t n = f.type == 1 ? 8 : 4;
      ok = in.size() >= n;
      if (ok) f.bits = little_endian(in.substr(0, n)), in.remove_prefix(n);
    } else if (ok && f.type == 2) {
      uint64_t n = 0;
      ok = read_varint(in, n) && in.size() >= n;
      if (ok) f.bytes = in.substr(0, n), in.remove_prefix(n);
    } else {
      ok = false;
    }
    if (!ok) {
      ADD_FAILURE() << "a malformed protobuf field " << f.number << " of wire type " << f.type;
      return out;
    }
    out.push_back(f);
  }
  return out;
}
inline double as_double(const Field& f) {
  EXPECT_EQ(f.type, 1u) << "field " << f.number;
  return std::bit_cast<double>(f.bits);
}
inline std::vector<double> packed_doubles(const Field& f) {
  EXPECT_EQ(f.type, 2u) << "field " << f.number;
  EXPECT_EQ(f.bytes.size() % 8, 0u);
  std::vector<double> out;
  for (size_t i = 0; i + 8 <= f.bytes.size(); i += 8)
    out.push_back(std::bit_cast<double>(little_endian(f.bytes.substr(i, 8))));
  return out;
}

inline tensorboard::Histogram decode_histogram(std::string_view bytes) {
  tensorboard::Histogram h;
  for (const Field& f : fields(bytes)) {
    switch (f.number) {
      case 1: h.min = as_double(f); break;
      case 2: h.max = as_double(f); break;
      case 3: h.num = as_double(f); break;
      case 4: h.sum = as_double(f); break;
      case 5: h.sum_squares = as_double(f); break;
      case 6: h.bucket_limit = packed_doubles(f); break;
      case 7: h.bucket = packed_doubles(f); break;
      default: ADD_FAILURE() << "HistogramProto: unexpected field " << f.number;
    }
  }
  return h;
}

struct Event {
  double wall_time = 0.0;
  int64_t step = 0;
  std::string file_version;     // empty: none
  int64_t session_status = -1;  // -1: no session_log
  std::vector<std::pair<std::string, float>> scalars;
  std::vector<std::pair<std::string, tensorboard::Histogram>> histograms;
};

// Event: wall_time 1, step 2, file_version 3, summary 5 (Summary.value 1: tag 1, simple_value 2, histo 5),
// session_log 7 (status 1).
inline Event decode_event(std::string_view bytes) {
  Event e;
  for (const Field& f : fields(bytes)) {
    if (f.number == 1) {
      e.wall_time = as_double(f);
    } else if (f.number == 2 && f.type == 0) {
      e.step = static_cast<int64_t>(f.bits);
    } else if (f.number == 3 && f.type == 2) {
      e.file_version = std::string(f.bytes);
    } else if (f.number == 7 && f.type == 2) {
      e.session_status = 0;
      for (const Field& s : fields(f.bytes)) {
        if (s.number == 1 && s.type == 0) e.session_status = static_cast<int64_t>(s.bits);
      }
    } else if (f.number == 5 && f.type == 2) {
      for (const Field& v : fields(f.bytes)) {
        EXPECT_EQ(v.number, 1u) << "Summary: unexpected field";
        std::string tag;
        bool has_value = false;
        for (const Field& x : fields(v.bytes)) {
          if (x.number == 1 && x.type == 2) {
            tag = std::string(x.bytes);
          } else if (x.number == 2 && x.type == 5) {
            e.scalars.emplace_back(tag, std::bit_cast<float>(static_cast<uint32_t>(x.bits)));
            has_value = true;
          } else if (x.number == 5 && x.type == 2) {
            e.histograms.emplace_back(tag, decode_histogram(x.bytes));
            has_value = true;
          } else {
            ADD_FAILURE() << "Summary.Value: unexpected field " << x.number;
          }
        }
        EXPECT_TRUE(has_value) << "Summary.Value " << tag << " has no value";
      }
    } else {
      ADD_FAILURE() << "Event: unexpected field " << f.number << " of wire type " << f.type;
    }
  }
  return e;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The events files of `dir` in name order (the order TensorBoard reads them in).
inline std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Every event of every file of `dir`, files in name order; a bad record fails the test.
inline std::vector<Event> read_dir(const std::string& dir) {
  std::vector<Event> events;
  for (const std::string& file : event_files(dir)) {
    const Records records = read_records(read_file(file));
    EXPECT_EQ(records.error, "") << file;
    for (const std::string& data : records.data) events.push_back(decode_event(data));
  }
  return events;
}

// A value of a tag at a step: a scalar, or a histogram's num.
struct Point {
  int64_t step;
  double value;
};
using Curves = std::map<std::string, std::vector<Point>>;

// The points TensorBoard's Python reader (EventAccumulator, file_version 2) keeps: a SessionLog START at step
// s drops the points read before it at steps >= s (_Purge keeps step < s).
inline Curves curves_after_start_purge(const std::vector<Event>& events) {
  Curves curves;
  for (const Event& e : events) {
    if (e.session_status == 1) {
      for (auto& [tag, points] : curves) std::erase_if(points, [&](const Point& p) { return p.step >= e.step; });
    }
    for (const auto& [tag, v] : e.scalars) curves[tag].push_back({e.step, v});
    for (const auto& [tag, h] : e.histograms) curves[tag].push_back({e.step, h.num});
  }
  return curves;
}

// The points TensorBoard's Rust data server (tensorboard --load_fast) keeps; it ignores SessionLog, and per tag
// a point at step s drops the points read before it at steps >= s (its reservoir's preemption).
inline Curves curves_after_step_purge(const std::vector<Event>& events) {
  Curves curves;
  auto add = [&](const std::string& tag, int64_t step, double value) {
    std::vector<Point>& points = curves[tag];
    std::erase_if(points, [&](const Point& p) { return p.step >= step; });
    points.push_back({step, value});
  };
  for (const Event& e : events) {
    for (const auto& [tag, v] : e.scalars) add(tag, e.step, v);
    for (const auto& [tag, h] : e.histograms) add(tag, e.step, h.num);
  }
  return curves;
}

inline std::vector<int64_t> steps_of(const std::vector<Point>& points) {
  std::vector<int64_t> steps;
  for (const Point& p : points) steps.push_back(p.step);
  return steps;
}

}  // namespace mantissa::testing_tb
