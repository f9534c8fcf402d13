// The bytes of TensorBoard's event files: CRC32C, the TFRecord framing, and the few protobuf messages a
// training run writes (Event with wall_time, step, file_version, session_log or a Summary of scalars and
// histograms), encoded by hand.
//
// Why by hand rather than with Debian's libprotobuf and a crc32c library: a run writes four message types
// and a dozen fields, all of them varints, fixed64/fixed32 numbers and length-delimited bytes; encoding them
// is a page of code, CRC32C another, and it adds no dependency (nor .proto files and a code generator to the
// build) for users who embed the library. The field numbers below are those of tensorboard's event.proto and
// summary.proto; tests/train/tensorboard_test.cc decodes what is written, and scripts/tensorboard_check.py
// reads it with TensorBoard's own reader.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mantissa::tensorboard {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data);
// The checksum TFRecord stores: the CRC rotated right by 15 bits plus a constant, so that a CRC computed over
// bytes that themselves hold CRCs does not degenerate.
uint32_t masked_crc32c(std::string_view data);

// One TFRecord: the data's length (uint64, little endian), the masked CRC of those 8 bytes, the data, the
// masked CRC of the data.
std::string tf_record(std::string_view data);

// TensorBoard's HistogramProto: bucket[i] counts the values v with bucket_limit[i - 1] < v <= bucket_limit[i]
// (the first bucket starts at min; TensorBoard draws it from min to its limit, and the last one to max).
struct Histogram {
  double min = 0.0;
  double max = 0.0;
  double num = 0.0;
  double sum = 0.0;
  double sum_squares = 0.0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

// Summary.Value: a tag with a scalar (simple_value, a float) or a histogram.
struct SummaryValue {
  std::string tag;
  std::variant<float, Histogram> value;
};

// The encoded Event messages (without the record framing). wall_time: seconds since the Unix epoch.
// The first event of every file: file_version "brain.Event:2", which tells TensorBoard that SessionLog START
// events, not out-of-order steps, mark a restart.
std::string file_version_event(double wall_time);
// SessionLog{status: START} at `step`: TensorBoard drops every point the folder's earlier files hold at
// steps >= `step` (a resumed run's first step), so the run's curves continue without duplicates.
std::string session_start_event(double wall_time, int64_t step);
// A Summary of `values` at `step`.
std::string summary_event(double wall_time, int64_t step, std::span<const SummaryValue> values);

}  // namespace mantissa::tensorboard
