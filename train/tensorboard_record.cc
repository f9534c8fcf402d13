// CRC32C, the TFRecord framing and a protobuf encoder for the fields of Event, SessionLog, Summary and
// HistogramProto that a training run writes.
#include "train/tensorboard_record.h"

#include <array>
#include <bit>
#include <cstring>

namespace mantissa::tensorboard {
namespace {

// The byte-at-a-time table of the reflected CRC-32C: entry b is the CRC register after shifting in byte b.
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) != 0 ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[b] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// TFRecord's mask: rotate right by 15, add a constant.
constexpr uint32_t kMaskDelta = 0xA282EAD8u;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

// Protobuf's wire format: each field is a key (field number << 3 | wire type) followed by its value.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }
// int64 fields are varints of the two's complement (steps are never negative here; a negative one would
// take ten bytes, as protobuf writes it).
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}
void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, kFixed64);
  put_le(out, std::bit_cast<uint64_t>(v), 8);
}
void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, kFixed32);
  put_le(out, std::bit_cast<uint32_t>(v), 4);
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}
// A packed repeated double: one length-delimited field holding the values back to back.
void put_packed_doubles(std::string& out, uint32_t field, std::span<const double> values) {
  std::string packed;
  packed.reserve(8 * values.size());
  for (double v : values) put_le(packed, std::bit_cast<uint64_t>(v), 8);
  put_bytes(out, field, packed);
}

// Field numbers, from tensorboard/compat/proto/{event,summary}.proto.
namespace event {
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
namespace session_log {
constexpr uint32_t kStatus = 1;
constexpr int64_t kStart = 1;  // SessionLog.SessionStatus.START
}  // namespace session_log
namespace summary {
constexpr uint32_t kValue = 1;
}
namespace value {
constexpr uint32_t kTag = 1, kSimpleValue = 2, kHisto = 5;
}
namespace histo {
constexpr uint32_t kMin = 1, kMax = 2, kNum = 3, kSum = 4, kSumSquares = 5, kBucketLimit = 6, kBucket = 7;
}

std::string encode(const Histogram& h) {
  std::string out;
  put_double(out, histo::kMin, h.min);
  put_double(out, histo::kMax, h.max);
  put_double(out, histo::kNum, h.num);
  put_double(out, histo::kSum, h.sum);
  put_double(out, histo::kSumSquares, h.sum_squares);
  put_packed_doubles(out, histo::kBucketLimit, h.bucket_limit);
  put_packed_doubles(out, histo::kBucket, h.bucket);
  return out;
}

std::string encode(const SummaryValue& v) {
  std::string out;
  put_bytes(out, value::kTag, v.tag);
  // Written even when 0: simple_value and histo are members of a oneof, where an absent field would mean
  // "no value" to the reader, not 0.
  if (const float* scalar = std::get_if<float>(&v.value)) {
    put_float(out, value::kSimpleValue, *scalar);
  } else {
    put_bytes(out, value::kHisto, encode(std::get<Histogram>(v.value)));
  }
  return out;
}

// The fields every event starts with. step is left out when 0, as protobuf writes a proto3 default.
std::string event_head(double wall_time, int64_t step) {
  std::string out;
  put_double(out, event::kWallTime, wall_time);
  if (step != 0) put_int64(out, event::kStep, step);
  return out;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (char c : data) crc = kCrcTable[(crc ^ static_cast<uint8_t>(c)) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string tf_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string out = event_head(wall_time, 0);
  put_bytes(out, event::kFileVersion, "brain.Event:2");
  return out;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string log;
  put_int64(log, session_log::kStatus, session_log::kStart);
  std::string out = event_head(wall_time, step);
  put_bytes(out, event::kSessionLog, log);
  return out;
}

std::string summary_event(double wall_time, int64_t step, std::span<const SummaryValue> values) {
  std::string summary_bytes;
  for (const SummaryValue& v : values) put_bytes(summary_bytes, summary::kValue, encode(v));
  std::string out = event_head(wall_time, step);
  put_bytes(out, event::kSummary, summary_bytes);
  return out;
}

}  // namespace mantissa::tensorboard
