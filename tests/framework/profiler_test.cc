// The profiler (framework/profiler/profiler.h): what it records of a forward and backward, the per-op table,
// and the Chrome trace, which every test here parses back (nlohmann::json) and checks: the fields
// torch.profiler's readers use, per-thread nesting, ordering, the fwdbwd links and the memory track.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <string>
#include <sys/resource.h>
#include <thread>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/profiler/profile.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

namespace fs = std::filesystem;
using profiler::Category;
using profiler::Event;
using profiler::Profile;
using profiler::Profiler;
using testing::HasSubstr;

// One MLP training step (forward, cross-entropy, backward, Adam) on a fixed batch.
struct MlpStep {
  MLP model{32, {64}, 10};
  Adam adam{model.named_parameters(), {.lr = 1e-3}};
  Tensor x = randn({16, 32});
  Tensor y = zeros({16}, {.dtype = DType::kI64});
  void run() {
    adam.zero_grad();
    Tensor loss = cross_entropy(model.forward(x), y);
    loss.backward();
    adam.step();
  }
};

const Event* find_event(const Profile& p, std::string_view name, Category category = Category::kOp) {
  for (const Event& e : p.events()) {
    if (e.name == name && e.category == category) return &e;
  }
  return nullptr;
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("mantissa_profiler_" + std::to_string(::getpid()) + "_" + name);
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The checks every written trace passes: the format's fields, each thread's "X" events nested (one holds
// the next or ends before it) and in start order, a finish for every flow start, a non-decreasing memory
// track. Returns the "X" events.
std::vector<nlohmann::json> check_trace(const nlohmann::json& trace) {
  EXPECT_TRUE(trace.contains("traceEvents"));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["distributedInfo"]["rank"], 0);
  std::vector<nlohmann::json> spans;
  std::map<int64_t, std::vector<std::pair<double, double>>> open;  // per tid: [start, end] of open spans
  std::map<int64_t, double> last_start;
  std::map<int64_t, int> flows;
  double last_memory_ts = -1;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const std::string ph = e.at("ph");
    if (ph == "X") {
      for (const char* key : {"name", "cat", "pid", "tid", "ts", "dur", "args"}) {
        EXPECT_TRUE(e.contains(key)) << key << " missing in " << e.dump();
      }
      const int64_t tid = e["tid"];
      const double ts = e["ts"], end = ts + static_cast<double>(e["dur"]);
      EXPECT_GE(static_cast<double>(e["dur"]), 0.0) << e.dump();
      if (last_start.contains(tid)) {
        EXPECT_GE(ts, last_start[tid]) << "out of start order: " << e.dump();
      }
      last_start[tid] = ts;
      auto& stack = open[tid];
      while (!stack.empty() && stack.back().second <= ts) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(end, stack.back().second + 1e-3) << "overlaps its parent: " << e.dump();
      }
      stack.emplace_back(ts, end);
      spans.push_back(e);
    } else if (ph == "s" || ph == "f") {
      EXPECT_EQ(e["cat"], "fwdbwd");
      flows[e["id"]] += ph == "s" ? 1 : -1;
    } else if (ph == "C") {
      EXPECT_GE(static_cast<double>(e["ts"]), last_memory_ts);
      last_memory_ts = e["ts"];
      EXPECT_GE(static_cast<double>(e["args"]["Total Reserved"]), static_cast<double>(e["args"]["Total Allocated"]));
    } else {
      EXPECT_EQ(ph, "M") << e.dump();
    }
  }
  for (const auto& [id, balance] : flows) EXPECT_EQ(balance, 0) << "flow " << id << " unpaired";
  return spans;
}

TEST(Profiler, RecordsNothingWhenOff) {
  EXPECT_FALSE(profiler::is_enabled());
  MlpStep step;
  step.run();
  Profiler prof;
  prof.start();
  EXPECT_TRUE(profiler::is_enabled());
  Profile p = prof.stop();
  EXPECT_FALSE(profiler::is_enabled());
  EXPECT_TRUE(p.events().empty());  // nothing ran inside the session
}

TEST(Profiler, RecordsTheOpsOfAStepWithShapesFlopsAndBackwardLinks) {
  MlpStep step;
  step.run();  // the optimizer's state exists before the profiled step
  Profiler prof;
  prof.start();
  step.run();
  Profile p = prof.stop();

  // The first Linear's forward GEMM, with the ReLU after it in its epilogue (Sequential runs the pair as
  // linear_act): [16, 32] x [32, 64] with 2 * 16 * 64 * 32 FLOPs.
  const Event* mm = nullptr;
  for (const Event& e : p.events()) {
    if (e.name == "linear_act" && e.flops == 2.0 * 16 * 64 * 32 && e.input_dims.starts_with("[[16,32]")) mm = &e;
  }
  ASSERT_NE(mm, nullptr) << p.table();
  EXPECT_EQ(mm->input_types.substr(0, 8), "[\"float\"");
  EXPECT_NE(mm->sequence_nr, profiler::kNoSequenceNr);
  // Its node's backward carries the same sequence number.
  bool linked = false;
  for (const Event& e : p.events()) linked |= e.category == Category::kBackward && e.sequence_nr == mm->sequence_nr;
  EXPECT_TRUE(linked) << "no backward event for the forward linear_act's node " << mm->sequence_nr;
  // The optimizer's step holds the update's work.
  EXPECT_NE(find_event(p, "Optimizer.step#Adam.step"), nullptr) << p.table();
  // Events nest on their thread, and a parent's self time is its duration less its children's.
  int64_t self_total = 0, top_total = 0;
  for (size_t i = 0; i < p.events().size(); ++i) {
    EXPECT_GE(p.self_ns(i), 0) << p.events()[i].name;
    self_total += p.self_ns(i);
    if (p.events()[i].depth == 0) top_total += p.events()[i].duration_ns();
  }
  EXPECT_EQ(self_total, top_total);
}

TEST(Profiler, TableAndJsonCountCallsAndAttributeFlops) {
  MlpStep step;
  Profiler prof;
  prof.start();
  step.run();
  Profile p = prof.stop();
  const std::vector<profiler::OpStats> rows = p.key_averages({.sort_by = profiler::SortBy::kName});
  const profiler::OpStats *matmul = nullptr, *linear_act = nullptr;
  for (const auto& r : rows) {
    if (r.name == "matmul") matmul = &r;
    if (r.name == "linear_act") linear_act = &r;
  }
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(linear_act, nullptr);
  // Two Linears, the first with its ReLU as one linear_act (its forward GEMM is that event); matmul events:
  // the second's forward GEMM, the two weights' gradients and the hidden activation's gradient.
  EXPECT_EQ(linear_act->calls, 1);
  EXPECT_DOUBLE_EQ(linear_act->flops, 2.0 * 16 * 32 * 64);
  EXPECT_EQ(matmul->calls, 4);
  EXPECT_DOUBLE_EQ(matmul->flops, 2.0 * 16 * 32 * 64 + 3 * (2.0 * 16 * 64 * 10));
  EXPECT_GT(matmul->gflops_per_s(), 0);
  const std::string table = p.table({.row_limit = 5, .peak_gflops = 100, .peak_gbytes_per_s = 10});
  EXPECT_THAT(table, HasSubstr("Self %"));
  EXPECT_THAT(table, HasSubstr("%peak"));
  EXPECT_THAT(table, HasSubstr("more rows"));
  const nlohmann::json json = nlohmann::json::parse(p.table_json());
  ASSERT_TRUE(json.is_array());
  bool found = false;
  for (const auto& r : json) {
    if (r["name"] == "matmul") {
      found = true;
      EXPECT_EQ(r["calls"], 4);
      EXPECT_GE(static_cast<double>(r["total_us"]), static_cast<double>(r["self_us"]));
    }
  }
  EXPECT_TRUE(found);
}

TEST(Profiler, RangesAutocastAndCastsUnderBf16) {
  MlpStep step;
  Profiler prof;
  prof.start();
  {
    profiler::Range outer("my_forward");
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    (void)step.model.forward(step.x);
  }
  Profile p = prof.stop();
  const Event* range = find_event(p, "my_forward", Category::kRange);
  ASSERT_NE(range, nullptr);
  EXPECT_EQ(range->depth, 0u);
  const Event* mm = find_event(p, "matmul");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->autocast, "bf16");
  EXPECT_THAT(mm->input_types, HasSubstr("c10::BFloat16"));
  EXPECT_GT(mm->depth, 0u);
  EXPECT_GE(mm->start_ns, range->start_ns);
  EXPECT_LE(mm->end_ns, range->end_ns);
  EXPECT_NE(find_event(p, "to"), nullptr) << "autocast's casts are events named \"to\"";
}

TEST(Profiler, ChromeTraceParsesNestsAndLinksForwardToBackward) {
  MlpStep step;
  Profiler prof;
  prof.start();
  step.run();
  Profile p = prof.stop();
  const fs::path path = temp_path("trace.json");
  p.export_chrome_trace(path.string());
  ASSERT_FALSE(fs::exists(path.string() + ".partial"));
  const nlohmann::json trace = read_json(path);
  const std::vector<nlohmann::json> spans = check_trace(trace);
  EXPECT_EQ(spans.size(), p.events().size());
  int flows = 0, memory = 0;
  for (const auto& e : trace["traceEvents"]) {
    flows += e["ph"] == "s";
    memory += e["ph"] == "C";
  }
  EXPECT_GT(flows, 0) << "no forward op linked to its backward";
  EXPECT_GT(memory, 0) << "no memory track";
  bool dims = false;
  for (const auto& e : spans) dims |= e["name"] == "matmul" && e["args"].contains("Input Dims");
  EXPECT_TRUE(dims);
  fs::remove(path);
}

TEST(Profiler, CnnStepUnderBf16ParsesToo) {
  CNN model;
  Adam adam(model.named_parameters(), {.lr = 1e-3});
  const Tensor x = randn({4, 1, 28, 28});
  const Tensor y = zeros({4}, {.dtype = DType::kI64});
  Profiler prof;
  prof.start();
  {
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    Tensor loss = cross_entropy(model.forward(x), y);
    loss.backward();
  }
  adam.step();
  Profile p = prof.stop();
  const Event* conv = find_event(p, "conv2d");
  ASSERT_NE(conv, nullptr) << p.table();
  EXPECT_GT(conv->flops, 0);
  EXPECT_NE(find_event(p, "conv2d_backward"), nullptr) << p.table();
  const fs::path path = temp_path("cnn.json");
  p.export_chrome_trace(path.string());
  check_trace(read_json(path));
  fs::remove(path);
}

TEST(Profiler, MemoryTrackAndPeakNameWhatRan) {
  Profiler prof;
  prof.start();
  {
    profiler::Range r("allocate_big");
    Tensor big = zeros({1 << 20});  // 4 MiB
  }
  Profile p = prof.stop();
  const profiler::MemoryPeak peak = p.memory_peak();
  EXPECT_GE(peak.allocated, p.allocated_at_start() + (4u << 20));
  EXPECT_THAT(peak.stack, testing::Contains("allocate_big"));
}

TEST(Profiler, EventsFromOtherThreadsHaveTheirOwnTrack) {
  Profiler prof;
  prof.start();
  std::thread worker([] {
    profiler::Range r("worker_range");
    (void)(ones({8}) + ones({8}));
  });
  worker.join();
  { profiler::Range r("main_range"); }
  Profile p = prof.stop();
  const Event* a = find_event(p, "worker_range", Category::kRange);
  const Event* b = find_event(p, "main_range", Category::kRange);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->thread, b->thread);
}

TEST(Profiler, OneSessionAtATimeAndStopWithoutStartIsAnError) {
  Profiler a, b;
  a.start();
  try {
    b.start();
    FAIL() << "a second session started";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("another profiler session is running"));
  }
  (void)a.stop();
  EXPECT_THROW((void)b.stop(), Error);
}

TEST(Profiler, ARangeOpenAcrossStopEndsAtTheStop) {
  Profiler prof;
  prof.start();
  auto r = std::make_unique<profiler::Range>("open_at_stop");
  Profile p = prof.stop();
  r.reset();  // ends after its session: nothing is written
  const Event* e = find_event(p, "open_at_stop", Category::kRange);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->end_ns, p.duration_ns());
}

TEST(Profiler, AnUnwritableTracePathIsAClearErrorAndLeavesNoFile) {
  Profiler prof;
  prof.start();
  { profiler::Range r("x"); }
  Profile p = prof.stop();
  const std::string path = "/nonexistent_dir_for_mantissa/trace.json";
  try {
    p.export_chrome_trace(path);
    FAIL() << "wrote into a folder that does not exist";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

// A disk that fills while the trace is written (here: a file-size limit) fails with the file's name, and
// neither the trace nor its partial file is left; an older trace at the path stays as it was.
TEST(Profiler, ADiskThatFillsLeavesTheOldTraceAndNoPartialFile) {
  MlpStep step;
  Profiler prof;
  prof.start();
  for (int i = 0; i < 3; ++i) step.run();
  Profile p = prof.stop();
  const fs::path path = temp_path("full.json");
  { std::ofstream(path) << "old"; }
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto* previous = signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead of a signal
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    p.export_chrome_trace(path.string());
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, previous);
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));
  std::ifstream in(path);
  std::string old;
  in >> old;
  EXPECT_EQ(old, "old");
  fs::remove(path);
}

}  // namespace
}  // namespace mantissa
