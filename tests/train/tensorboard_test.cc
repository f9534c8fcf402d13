// TensorBoard event files: CRC32C test vectors, the record framing and every masked CRC checked by a reader
// of its own (tensorboard_reader.h), scalars and histograms round-tripped through the Event encoding, every
// corrupted byte detected, a write cut short leaving whole records, the gradient histograms, mantissa-train
// runs with --tensorboard (tags, steps, the values --metrics reports), a resumed run whose curves hold every
// step once under both of TensorBoard's restart rules, and a folder that cannot be created.
#include "train/tensorboard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "framework/generator.h"
#include "tests/support/temp_dir.h"
#include "tests/train/tensorboard_reader.h"
#include "train/grad_histogram.h"
#include "train/run.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;
using namespace testing_tb;
using tensorboard::Histogram;
using tensorboard::SummaryValue;

constexpr float kInf = std::numeric_limits<float>::infinity();

using testing::TempDir;

TEST(TensorBoardCrc, KnownCrc32cVectors) {
  // The check value of CRC-32C, and RFC 3720's (iSCSI) test vectors.
  EXPECT_EQ(tensorboard::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tensorboard::crc32c(""), 0u);
  EXPECT_EQ(tensorboard::crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(tensorboard::crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  EXPECT_EQ(tensorboard::crc32c(ascending), 0x46DD794Eu);
  // The table-driven CRC and the masked one agree with the reader's bit-at-a-time definition.
  for (const std::string& s : {std::string("brain.Event:2"), ascending, std::string(1000, 'x')}) {
    EXPECT_EQ(tensorboard::crc32c(s), reference_crc32c(s));
    EXPECT_EQ(tensorboard::masked_crc32c(s), reference_masked_crc(s));
  }
}

TEST(TensorBoardRecord, FramesDataWithItsLengthAndMaskedCrcs) {
  const std::string data = "some event bytes";
  const std::string record = tensorboard::tf_record(data);
  ASSERT_EQ(record.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(little_endian(record.substr(0, 8)), data.size());
  const Records read = read_records(record + tensorboard::tf_record(""));
  EXPECT_EQ(read.error, "");
  ASSERT_EQ(read.data.size(), 2u);
  EXPECT_EQ(read.data[0], data);
  EXPECT_EQ(read.data[1], "");
}

TEST(TensorBoardRecord, EventsRoundTrip) {
  const Event version = decode_event(tensorboard::file_version_event(1700000000.25));
  EXPECT_EQ(version.file_version, "brain.Event:2");
  EXPECT_EQ(version.wall_time, 1700000000.25);
  EXPECT_EQ(version.step, 0);

  const Event start = decode_event(tensorboard::session_start_event(12.5, 4001));
  EXPECT_EQ(start.session_status, 1);  // SessionLog.START
  EXPECT_EQ(start.step, 4001);
  EXPECT_EQ(start.wall_time, 12.5);

  const Histogram h{.min = -3.5,
                    .max = 7.25,
                    .num = 6,
                    .sum = 10.5,
                    .sum_squares = 80.125,
                    .bucket_limit = {-2.0, 0.0, 8.0},
                    .bucket = {1, 2, 3}};
  // 0 is written too (a oneof member left out would read as no value); large steps take multi-byte varints.
  const std::vector<SummaryValue> values = {
      {"train/loss", 2.3025851f}, {"zero", 0.0f}, {"neg", -1.5e-30f}, {"inf", kInf}, {"grad/h", h}};
  const Event e = decode_event(tensorboard::summary_event(3.0, int64_t{1} << 40, values));
  EXPECT_EQ(e.step, int64_t{1} << 40);
  ASSERT_EQ(e.scalars.size(), 4u);
  EXPECT_EQ(e.scalars[0], std::make_pair(std::string("train/loss"), 2.3025851f));
  EXPECT_EQ(e.scalars[1], std::make_pair(std::string("zero"), 0.0f));
  EXPECT_EQ(e.scalars[2], std::make_pair(std::string("neg"), -1.5e-30f));
  EXPECT_EQ(e.scalars[3], std::make_pair(std::string("inf"), kInf));
  ASSERT_EQ(e.histograms.size(), 1u);
  const Histogram& back = e.histograms[0].second;
  EXPECT_EQ(e.histograms[0].first, "grad/h");
  EXPECT_EQ(back.min, h.min);
  EXPECT_EQ(back.max, h.max);
  EXPECT_EQ(back.num, h.num);
  EXPECT_EQ(back.sum, h.sum);
  EXPECT_EQ(back.sum_squares, h.sum_squares);
  EXPECT_EQ(back.bucket_limit, h.bucket_limit);
  EXPECT_EQ(back.bucket, h.bucket);
}

TEST(TensorBoardWriter, EveryCorruptedByteIsDetected) {
  TempDir dir("tb_corrupt");
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::open(dir.path(), 0);
    ASSERT_TRUE(writer.ok()) << writer.status();
    (*writer)->write(StepMetrics{.step = 1, .loss = 2.5, .lr = 1e-3, .scale = 65536, .samples_per_s = 100});
    (*writer)->write(EvalMetrics{.step = 1, .loss = 2.25, .accuracy = 0.5});
    (*writer)->flush();
    ASSERT_TRUE((*writer)->status().ok()) << (*writer)->status();
    path = (*writer)->path();
  }
  const std::string bytes = read_file(path);
  const Records whole = read_records(bytes);
  ASSERT_EQ(whole.error, "");
  ASSERT_EQ(whole.data.size(), 4u);  // file_version, START, the step, the evaluation
  // A CRC32C catches every error burst of up to 32 bits, so each single changed byte of the file is found:
  // in a length or its CRC (bad length CRC), in the data or its CRC (bad data CRC).
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5A);
    const Records read = read_records(bad);
    EXPECT_TRUE(read.error.starts_with("a bad length CRC") || read.error.starts_with("a bad data CRC"))
        << "byte " << i << ": " << read.error;
  }
  EXPECT_TRUE(read_records(bytes.substr(0, bytes.size() - 1)).error.starts_with("data cut short"));
  EXPECT_TRUE(read_records(bytes.substr(0, bytes.size() - 5)).error.starts_with("data cut short"));
}

TEST(TensorBoardWriter, AWriteCutShortLeavesOnlyWholeRecords) {
  TempDir dir("tb_short");
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::open(dir.path(), 0);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const auto header = static_cast<rlim_t>(fs::file_size((*writer)->path()));
  // The file may grow by 1000 more bytes: the record that crosses that limit is written in part (write()
  // stops at the limit, then fails with EFBIG; SIGXFSZ ignored), as on a disk that fills up.
  struct sigaction ignore = {}, old_action = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGXFSZ, &ignore, &old_action), 0);
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  rlimit limit = old_limit;
  limit.rlim_cur = header + 1000;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  int64_t written = 0;
  for (int64_t step = 1; step <= 100 && (*writer)->status().ok(); ++step) {
    const SummaryValue value[] = {{"a/tag/long/enough/that/1000/bytes/are/not/a/multiple/of/the/record", 1.0f}};
    (*writer)->write(step, value);
    if ((*writer)->status().ok()) ++written;
  }
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  ASSERT_EQ(sigaction(SIGXFSZ, &old_action, nullptr), 0);

  EXPECT_FALSE((*writer)->status().ok());
  EXPECT_TRUE(absl::StrContains((*writer)->status().message(), (*writer)->path())) << (*writer)->status();
  const Records read = read_records(read_file((*writer)->path()));
  EXPECT_EQ(read.error, "");
  EXPECT_EQ(static_cast<int64_t>(read.data.size()), 2 + written);
  EXPECT_GT(written, 5);
  // Nothing more is written after the error.
  (*writer)->write(StepMetrics{.step = 1000});
  EXPECT_EQ(read_records(read_file((*writer)->path())).data.size(), read.data.size());
}

TEST(TensorBoardWriter, AFolderThatCannotBeCreatedIsAClearError) {
  TempDir dir("tb_bad");
  {
    std::FILE* f = std::fopen((dir / "a_file").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  const std::string bad = dir / "a_file/runs";
  const absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::open(bad, 0);
  ASSERT_FALSE(writer.ok());
  EXPECT_TRUE(absl::StrContains(writer.status().message(), "cannot create the folder " + bad)) << writer.status();

  // mantissa-train stops before its first step and writes nothing, not even the metrics file.
  RunOptions o{.model = ModelKind::kMLP, .data = DataKind::kSynthetic, .mlp_hidden = {8}, .max_steps = 2};
  o.metrics = dir / "run.jsonl";
  o.tensorboard = bad;
  o.progress = ProgressMode::kNone;
  std::FILE* out = std::fopen("/dev/null", "w");
  const absl::StatusOr<RunSummary> summary = run(o, out);
  std::fclose(out);
  ASSERT_FALSE(summary.ok());
  EXPECT_TRUE(absl::StrContains(summary.status().message(), "tensorboard: cannot create the folder"));
  EXPECT_FALSE(fs::exists(o.metrics));
}

TEST(GradientHistograms, BucketsAreRightClosedAndTrimmed) {
  const std::vector<double> values = {-0.5, 0.5, 1.0, 1.5, 2.5, 10.0};
  const Histogram h = histogram(values, {-1.0, 0.0, 1.0, 2.0, 3.0, 4.0});
  // (-1, 0]: -0.5; (0, 1]: 0.5, 1; (1, 2]: 1.5; (2, 3]: 2.5; (3, 4] and beyond: 10. The first bucket also
  // takes what is below the first limit.
  EXPECT_EQ(h.bucket_limit, (std::vector<double>{0.0, 1.0, 2.0, 3.0, 4.0}));
  EXPECT_EQ(h.bucket, (std::vector<double>{1, 2, 1, 1, 1}));
  EXPECT_EQ(h.min, -0.5);
  EXPECT_EQ(h.max, 10.0);
  EXPECT_EQ(h.num, 6);
  EXPECT_EQ(h.sum, 15.0);
  EXPECT_EQ(h.sum_squares, 0.25 + 0.25 + 1 + 2.25 + 6.25 + 100);
  const Histogram empty = histogram({}, {0.0, 1.0});
  EXPECT_EQ(empty.num, 0);
  EXPECT_TRUE(empty.bucket.empty());
}

TEST(GradientHistograms, Log2OfTheFiniteNonzeroGradsZerosAndNonFiniteCountedApart) {
  Tensor a = zeros({6}).set_requires_grad(true), b = zeros({2}).set_requires_grad(true);
  Tensor no_grad = zeros({3}).set_requires_grad(true);  // never reached by a backward: left out
  const float tiny = std::ldexp(1.0f, -20);
  a.set_grad(from_vector(std::vector<float>{0.0f, tiny, -0.125f, 1.0f, kInf, 3.0f}));
  b.set_grad(from_vector(std::vector<float>{std::nanf(""), -0.0f}));
  const std::vector<NamedTensor> params = {{"a", a}, {"b", b}, {"c", no_grad}};
  const GradientHistograms g = gradient_histograms(params);
  EXPECT_EQ(g.elements, 8);
  EXPECT_DOUBLE_EQ(g.zero_fraction, 2.0 / 8);
  EXPECT_DOUBLE_EQ(g.nonfinite_fraction, 2.0 / 8);
  // log2|g|: -20, -3, 0, log2(3), in buckets 1/2 wide closed on the right.
  EXPECT_EQ(g.log2_abs.num, 4);
  EXPECT_EQ(g.log2_abs.min, -20.0);
  EXPECT_DOUBLE_EQ(g.log2_abs.max, std::log2(3.0));
  EXPECT_DOUBLE_EQ(g.log2_abs.sum, -23.0 + std::log2(3.0));
  ASSERT_EQ(g.log2_abs.bucket_limit.size(), 45u);  // -20, -19.5, ..., 2
  EXPECT_EQ(g.log2_abs.bucket_limit.front(), -20.0);
  EXPECT_EQ(g.log2_abs.bucket_limit.back(), 2.0);
  std::vector<double> expected(45, 0.0);
  expected[0] = 1;   // -20 in (-20.5, -20]
  expected[34] = 1;  // -3 in (-3.5, -3]
  expected[40] = 1;  // 0 in (-0.5, 0]
  expected[44] = 1;  // 1.58 in (1.5, 2]
  EXPECT_EQ(g.log2_abs.bucket, expected);
  // The raw values: the six finite ones (zeros included) in TensorFlow's buckets.
  EXPECT_EQ(g.values.num, 6);
  EXPECT_EQ(g.values.min, -0.125);
  EXPECT_EQ(g.values.max, 3.0);
  double counted = 0;
  for (double c : g.values.bucket) counted += c;
  EXPECT_EQ(counted, 6);
}

TEST(GradientHistograms, TheComputedBucketsAreTheSearchedOnesOnALargeGradSplitOverThreads) {
  // A million elements over 60 binades of both signs, with zeros, infs and nans: the threads' parts and
  // each element's bucket computed from its log2 must give what one binary search per value gives.
  Generator gen(7);
  const int64_t n = 1 << 20;
  std::vector<float> g(static_cast<size_t>(n));
  std::vector<double> finite, log2_abs;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = gen.next_u32();
    float v = std::ldexp(1.0f + static_cast<float>(r % 1000) / 1000.0f, static_cast<int>(r % 60) - 50);
    if (r % 7 == 0) v = -v;
    if (r % 101 == 0) v = 0.0f;
    if (r % 211 == 0) v = (r % 2 == 0) ? kInf : std::nanf("");
    g[static_cast<size_t>(i)] = v;
    if (std::isfinite(v)) finite.push_back(v);
    if (std::isfinite(v) && v != 0.0f) log2_abs.push_back(std::log2(std::fabs(static_cast<double>(v))));
  }
  Tensor p = zeros({n}).set_requires_grad(true);
  p.set_grad(from_vector(g));
  const GradientHistograms h = gradient_histograms(std::vector<NamedTensor>{{"p", p}});
  std::vector<double> log2_limits;
  for (double limit = -149.0; limit <= 128.0; limit += 0.5) log2_limits.push_back(limit);
  for (const auto& [got, want] : {std::pair{h.values, histogram(finite, default_bucket_limits())},
                                  std::pair{h.log2_abs, histogram(log2_abs, log2_limits)}}) {
    EXPECT_EQ(got.bucket_limit, want.bucket_limit);
    EXPECT_EQ(got.bucket, want.bucket);
    EXPECT_EQ(got.num, want.num);
    EXPECT_EQ(got.min, want.min);
    EXPECT_EQ(got.max, want.max);
    // Added in another order (by parts): equal to rounding.
    EXPECT_NEAR(got.sum, want.sum, 1e-9 * want.sum_squares);
    EXPECT_NEAR(got.sum_squares, want.sum_squares, 1e-12 * want.sum_squares);
  }
  EXPECT_EQ(h.elements, n);
}

TEST(GradientHistograms, DefaultBucketLimitsAreTensorFlowsSpacing) {
  const std::vector<double>& limits = default_bucket_limits();
  ASSERT_TRUE(std::is_sorted(limits.begin(), limits.end()));
  const auto zero = std::find(limits.begin(), limits.end(), 0.0);
  ASSERT_NE(zero, limits.end());
  EXPECT_DOUBLE_EQ(*(zero + 1), 1e-12);
  EXPECT_DOUBLE_EQ(*(zero + 2), 1.1e-12);
  EXPECT_DOUBLE_EQ(*(zero - 1), -1e-12);
  EXPECT_EQ(limits.back(), std::numeric_limits<double>::max());
  EXPECT_LT(*(limits.end() - 2), 1e20);
  EXPECT_GT(*(limits.end() - 2) * 1.1, 1e20);
}

// A few seconds of mantissa-train: a small MLP on synthetic images, evaluated on one batch.
RunOptions quick_run(const TempDir& dir, int64_t steps) {
  RunOptions o;
  o.data = DataKind::kSynthetic;
  o.mlp_hidden = {32};
  o.batch_size = 32;
  o.max_steps = steps;
  o.eval_every = 4;
  o.eval_batches = 1;
  o.tensorboard = dir / "tb";
  o.tensorboard_histogram_every = 5;
  o.progress = ProgressMode::kNone;
  return o;
}

absl::Status run_quietly(const RunOptions& o) {
  std::FILE* out = std::fopen("/dev/null", "w");
  const absl::StatusOr<RunSummary> summary = run(o, out);
  std::fclose(out);
  return summary.status();
}

std::vector<int64_t> range(int64_t first, int64_t last, int64_t by = 1) {
  std::vector<int64_t> steps;
  for (int64_t s = first; s <= last; s += by) steps.push_back(s);
  return steps;
}

// The number after `"key": ` in a JSON line (NaN for null).
double json_number(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\": ");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + key.size() + 4, nullptr);
}

const std::set<std::string> kStepTags = {"train/loss",          "train/lr",       "train/grad_norm",
                                         "train/samples_per_s", "amp/loss_scale", "amp/skipped_steps"};
const std::set<std::string> kEvalTags = {"eval/loss", "eval/accuracy"};
const std::set<std::string> kHistogramTags = {"grad/log2_abs", "grad/values", "grad/zero_fraction",
                                              "grad/nonfinite_fraction"};

// Every tag of `curves` has exactly the steps its kind is written at.
void expect_steps(const Curves& curves, const std::vector<int64_t>& step_steps, const std::vector<int64_t>& eval_steps,
                  const std::vector<int64_t>& histogram_steps) {
  std::set<std::string> tags;
  for (const auto& [tag, points] : curves) {
    tags.insert(tag);
    const std::vector<int64_t>& expected = kStepTags.contains(tag)   ? step_steps
                                           : kEvalTags.contains(tag) ? eval_steps
                                                                     : histogram_steps;
    EXPECT_EQ(steps_of(points), expected) << tag;
  }
  std::set<std::string> all = kStepTags;
  all.insert(kEvalTags.begin(), kEvalTags.end());
  all.insert(kHistogramTags.begin(), kHistogramTags.end());
  EXPECT_EQ(tags, all);
}

TEST(TensorBoardRun, WritesEveryTagAtItsStepsWithTheValuesOfTheMetricsFile) {
  TempDir dir("tb_run");
  RunOptions o = quick_run(dir, 12);
  o.metrics = dir / "run.jsonl";
  ASSERT_TRUE(run_quietly(o).ok());

  const std::vector<std::string> files = event_files(o.tensorboard);
  ASSERT_EQ(files.size(), 1u);
  const std::string name = fs::path(files[0]).filename().string();
  EXPECT_TRUE(name.ends_with("." + std::to_string(getpid()))) << name;  // events.out.tfevents.<time>.<host>.<pid>
  const std::vector<Event> events = read_dir(o.tensorboard);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].session_status, 1);
  EXPECT_EQ(events[1].step, 0);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_GE(events[i].wall_time, events[i - 1].wall_time);
    EXPECT_GT(events[i].wall_time, 1.6e9);  // seconds since 1970, not a steady clock
  }
  const Curves curves = curves_after_start_purge(events);
  expect_steps(curves, range(1, 12), {4, 8, 12}, {5, 10});

  // The same numbers as the metrics file's, rounded to float.
  std::istringstream lines(read_file(o.metrics));
  std::string line;
  size_t steps = 0, evals = 0;
  int64_t skipped = 0;
  while (std::getline(lines, line)) {
    if (line.starts_with("{\"step\"")) {
      skipped += absl::StrContains(line, "\"skipped\": true") ? 1 : 0;
      for (const auto& [tag, key] :
           std::vector<std::pair<std::string, std::string>>{{"train/loss", "loss"},
                                                            {"train/lr", "lr"},
                                                            {"train/grad_norm", "grad_norm"},
                                                            {"train/samples_per_s", "samples_per_s"},
                                                            {"amp/loss_scale", "scale"}}) {
        EXPECT_FLOAT_EQ(curves.at(tag)[steps].value, static_cast<float>(json_number(line, key))) << tag << " " << line;
      }
      EXPECT_EQ(curves.at("amp/skipped_steps")[steps].value, static_cast<double>(skipped));
      ++steps;
    } else if (line.starts_with("{\"event\": \"eval\"")) {
      EXPECT_FLOAT_EQ(curves.at("eval/loss")[evals].value, static_cast<float>(json_number(line, "loss")));
      EXPECT_FLOAT_EQ(curves.at("eval/accuracy")[evals].value, static_cast<float>(json_number(line, "accuracy")));
      ++evals;
    }
  }
  EXPECT_EQ(steps, 12u);
  EXPECT_EQ(evals, 3u);
  // The log2|g| histogram holds every finite nonzero gradient element: the MLP's 784*32 + 32 + 32*10 + 10.
  const double params = 784.0 * 32 + 32 + 32 * 10 + 10;
  for (const Event& e : events) {
    for (const auto& [tag, h] : e.histograms) {
      double counted = 0;
      for (double c : h.bucket) counted += c;
      EXPECT_EQ(counted, h.num) << tag;
      EXPECT_EQ(h.bucket.size(), h.bucket_limit.size()) << tag;
      EXPECT_LE(h.num, params) << tag;
      EXPECT_GT(h.num, params / 2) << tag;
    }
  }
}

TEST(TensorBoardRun, AResumedRunContinuesTheCurvesWithEveryStepOnce) {
  TempDir dir("tb_resume");
  RunOptions o = quick_run(dir, 20);
  o.eval_every = 5;
  o.tensorboard_histogram_every = 3;
  o.checkpoint_dir = dir / "ck";
  o.checkpoint_every = 8;
  ASSERT_TRUE(run_quietly(o).ok());
  const std::vector<Event> unbroken = read_dir(o.tensorboard);
  // The run is taken up again from its checkpoint at step 8, as after a crash at step 20: steps 9 to 20 are
  // written a second time, into a second file.
  o.resume = dir / "ck/step_8.h5";
  ASSERT_TRUE(run_quietly(o).ok());

  const std::vector<std::string> files = event_files(o.tensorboard);
  ASSERT_EQ(files.size(), 2u);
  const std::vector<Event> events = read_dir(o.tensorboard);
  const std::vector<Event> resumed = [&] {
    std::vector<Event> out;
    for (const std::string& data : read_records(read_file(files[1])).data) out.push_back(decode_event(data));
    return out;
  }();
  ASSERT_GE(resumed.size(), 2u);
  EXPECT_EQ(resumed[0].file_version, "brain.Event:2");
  EXPECT_EQ(resumed[1].session_status, 1);
  EXPECT_EQ(resumed[1].step, 9);
  size_t loss_points = 0;
  for (const Event& e : events) {
    for (const auto& [tag, v] : e.scalars) loss_points += tag == "train/loss" ? 1 : 0;
  }
  EXPECT_EQ(loss_points, 20u + 12u);  // before TensorBoard's purge

  // Under either of TensorBoard's rules every step is there once, and the curves are the unbroken run's
  // (resuming on the CPU is bit-exact).
  const Curves by_start = curves_after_start_purge(events), by_step = curves_after_step_purge(events);
  expect_steps(by_start, range(1, 20), {5, 10, 15, 20}, range(3, 18, 3));
  expect_steps(by_step, range(1, 20), {5, 10, 15, 20}, range(3, 18, 3));
  const Curves expected = curves_after_start_purge(unbroken);
  for (const char* tag : {"train/loss", "train/grad_norm", "amp/loss_scale", "eval/loss", "grad/log2_abs"}) {
    for (const Curves* curves : {&by_start, &by_step}) {
      ASSERT_EQ(curves->at(tag).size(), expected.at(tag).size()) << tag;
      for (size_t i = 0; i < expected.at(tag).size(); ++i) {
        EXPECT_EQ(curves->at(tag)[i].value, expected.at(tag)[i].value) << tag << " at step " << curves->at(tag)[i].step;
      }
    }
  }
}

TEST(TensorBoardRun, ANewRunInTheSameFolderReplacesTheEarlierCurves) {
  TempDir dir("tb_again");
  ASSERT_TRUE(run_quietly(quick_run(dir, 10)).ok());
  const RunOptions o = quick_run(dir, 6);
  ASSERT_TRUE(run_quietly(o).ok());
  const std::vector<std::string> files = event_files(o.tensorboard);
  ASSERT_EQ(files.size(), 2u);
  const std::vector<Event> events = read_dir(o.tensorboard);
  // The second run's START at step 0 drops every point of the first; its last evaluation is at its end.
  expect_steps(curves_after_start_purge(events), range(1, 6), {4, 6}, {5});
  expect_steps(curves_after_step_purge(events), range(1, 6), {4, 6}, {5});
}

TEST(TensorBoardRun, ARunThatFailsToStartLeavesNoEventsFile) {
  TempDir dir("tb_no_start");
  RunOptions o = quick_run(dir, 2);
  o.metrics = dir / "missing/run.jsonl";  // its folder does not exist
  const absl::Status s = run_quietly(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "run.jsonl")) << s;
  EXPECT_TRUE(event_files(o.tensorboard).empty());
}

}  // namespace
}  // namespace mantissa
