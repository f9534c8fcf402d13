// The NCCL group's watchdog on the CPU: a fake backend stands in for the events, ncclCommGetAsyncError and
// ncclCommAbort, and a fake clock (advanced by the host waits' pauses) makes every timeout instant. One
// case runs the real thread with a real clock and a timeout of milliseconds.
#include "framework/dist/nccl_watchdog.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/error.h"

namespace mantissa::dist_detail {
namespace {

using namespace std::chrono_literals;
using EventState = NcclWatchdogBackend::EventState;

// Events are numbers whose state the test sets. Locked: in the threaded case the watchdog thread polls
// while the test thread launches and reads.
class FakeBackend final : public NcclWatchdogBackend {
 public:
  explicit FakeBackend(bool real_clock = false) : real_clock_(real_clock) {}

  EventId record() {
    std::lock_guard<std::mutex> lock(mu_);
    events_[next_] = EventState::kPending;
    return next_++;
  }
  void set(EventId event, EventState state) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.at(event) = state;
  }
  void set_async_error(std::string e) {
    std::lock_guard<std::mutex> lock(mu_);
    async_ = std::move(e);
  }
  void advance(std::chrono::microseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    clock_ += d;
  }
  int aborts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborts_;
  }
  int async_queries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return async_queries_;
  }
  bool destroyed(EventId event) const {
    std::lock_guard<std::mutex> lock(mu_);
    return !events_.contains(event);
  }
  TimePoint start() const { return TimePoint{} + 1h; }

  EventState query_event(EventId event, std::string& error) override {
    std::lock_guard<std::mutex> lock(mu_);
    const EventState s = events_.at(event);  // throws (and fails the test) for a destroyed event
    if (s == EventState::kFailed) error = "an illegal memory access was encountered";
    return s;
  }
  void destroy_event(EventId event) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (events_.erase(event) != 1) throw std::logic_error("an event destroyed twice");
  }
  std::string async_error() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++async_queries_;
    return async_;
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++aborts_;
  }
  TimePoint now() override {
    if (real_clock_) return std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    return clock_;
  }
  void sleep_for(std::chrono::microseconds d) override {
    if (real_clock_) {
      std::this_thread::sleep_for(d);
      return;
    }
    advance(d);
  }

 private:
  bool real_clock_;
  mutable std::mutex mu_;
  std::map<EventId, EventState> events_;
  EventId next_ = 1;
  std::string async_;
  int aborts_ = 0;
  int async_queries_ = 0;
  TimePoint clock_ = TimePoint{} + 1h;
};

NcclWatchdogOptions fake_options(std::chrono::milliseconds timeout = 100ms) {
  return {.timeout = timeout,
          .host_interval = 1ms,
          .rank = 1,
          .size = 2,
          .device = "cuda:1",
          .thread = WatchdogThread::kNone};
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

TEST(NcclWatchdog, CompletedCollectivesAreRetiredInOrder) {
  FakeBackend fake;
  NcclWatchdog dog(&fake, fake_options());
  NcclWatchdog::EventId e1 = 0, e2 = 0;
  EXPECT_EQ(dog.launch("all_reduce", "sum of f32 [4], 16 B", [&] { return e1 = fake.record(); }), 1u);
  EXPECT_EQ(dog.launch("broadcast", "f32 [4], 16 B from rank 0", [&] { return e2 = fake.record(); }), 2u);
  dog.poll();
  EXPECT_EQ(dog.in_flight(), 2u);
  EXPECT_FALSE(dog.check(1, "all_reduce"));
  // The second event alone does not retire anything: the first is still in flight ahead of it.
  fake.set(e2, EventState::kDone);
  dog.poll();
  EXPECT_EQ(dog.in_flight(), 2u);
  fake.set(e1, EventState::kDone);
  fake.advance(1s);  // long after the timeout, but done: no abort
  dog.poll();
  EXPECT_EQ(dog.in_flight(), 0u);
  EXPECT_TRUE(dog.check(1, "all_reduce"));
  EXPECT_TRUE(dog.check(2, "broadcast"));
  EXPECT_TRUE(fake.destroyed(e1));
  EXPECT_TRUE(fake.destroyed(e2));
  dog.wait(2, "broadcast");  // returns at once
  EXPECT_EQ(fake.aborts(), 0);
  EXPECT_EQ(dog.broken(), "");
  EXPECT_TRUE(dog.drain());
}

TEST(NcclWatchdog, ACollectiveThatNeverCompletesTimesOutAndAbortsOnce) {
  FakeBackend fake;
  std::vector<std::string> reported;
  NcclWatchdogOptions options = fake_options(100ms);
  options.on_abort = [&](const std::string& reason) { reported.push_back(reason); };
  NcclWatchdog dog(&fake, options);
  const NcclWatchdog::EventId e = fake.record();
  const uint64_t seq = dog.launch("all_reduce", "avg of bf16 [256, 1024], 512.00 KiB", [&] { return e; });
  fake.advance(100ms);
  dog.poll();  // exactly the timeout: not past it
  EXPECT_EQ(fake.aborts(), 0);
  fake.advance(1ms);
  dog.poll();
  ASSERT_EQ(fake.aborts(), 1);
  const std::string reason = dog.broken();
  for (std::string_view part : {"NCCL all_reduce #1", "avg of bf16 [256, 1024], 512.00 KiB", "rank 1 of 2", "(cuda:1)",
                                "did not complete in 101 ms", "timeout 100 ms", "NCCL reported no error", "aborted"}) {
    EXPECT_TRUE(contains(reason, part)) << part << " not in: " << reason;
  }
  EXPECT_EQ(reported, std::vector<std::string>{reason});
  EXPECT_TRUE(fake.destroyed(e));
  EXPECT_EQ(dog.in_flight(), 0u);
  // More polls and waits do not abort again.
  dog.poll();
  EXPECT_THROW(dog.wait(seq, "all_reduce"), Error);
  EXPECT_FALSE(dog.drain());
  EXPECT_EQ(fake.aborts(), 1);
  EXPECT_EQ(reported.size(), 1u);
}

TEST(NcclWatchdog, CallsAfterTheAbortFailAtOnceWithTheSameReason) {
  FakeBackend fake;
  NcclWatchdog dog(&fake, fake_options(10ms));
  dog.launch("all_gather", "f16 [8], 16 B", [&] { return fake.record(); });
  fake.advance(20ms);
  dog.poll();
  const std::string reason = dog.broken();
  ASSERT_FALSE(reason.empty());
  int enqueued = 0;
  const std::string launch = message_of([&] {
    dog.launch("broadcast", "f32 [2], 8 B from rank 0", [&] {
      ++enqueued;
      return fake.record();
    });
  });
  EXPECT_EQ(enqueued, 0);  // nothing reaches the aborted communicator
  EXPECT_TRUE(contains(launch, "broadcast: the NCCL process group is unusable: " + reason)) << launch;
  EXPECT_TRUE(contains(launch, "HINT:")) << launch;
  const std::string work = message_of([&] { dog.check(1, "all_gather"); });
  EXPECT_TRUE(contains(work, "all_gather #1: ")) << work;
  EXPECT_TRUE(contains(work, reason)) << work;
  EXPECT_TRUE(contains(message_of([&] { dog.check_usable("barrier"); }), reason));
  // The fake clock stands still: a wait that blocked would never end.
  EXPECT_TRUE(contains(message_of([&] { dog.wait(1, "all_gather"); }), reason));
  EXPECT_EQ(fake.aborts(), 1);
}

TEST(NcclWatchdog, TheHostWaitObservesTheTimeout) {
  FakeBackend fake;
  NcclWatchdog dog(&fake, fake_options(50ms));
  const uint64_t seq = dog.launch("barrier", "f32 [1], 4 B", [&] { return fake.record(); });
  const NcclWatchdogBackend::TimePoint before = fake.now();
  const std::string message = message_of([&] { dog.wait(seq, "barrier"); });
  const auto waited = fake.now() - before;
  EXPECT_TRUE(contains(message, "barrier #1: the NCCL process group is unusable: NCCL barrier #1")) << message;
  EXPECT_TRUE(contains(message, "did not complete in 51 ms")) << message;
  // It gave up one pause after the deadline, not later.
  EXPECT_GT(waited, 50ms);
  EXPECT_LE(waited, 51ms);
  EXPECT_EQ(fake.aborts(), 1);
}

TEST(NcclWatchdog, AnAsyncErrorMidFlightAbortsAndNamesTheOldestCollective) {
  FakeBackend fake;
  NcclWatchdog dog(&fake, fake_options(1h));
  const NcclWatchdog::EventId e1 = fake.record(), e2 = fake.record();
  dog.launch("all_reduce", "sum of f32 [1024], 4.00 KiB", [&] { return e1; });
  dog.launch("all_reduce", "sum of f32 [2048], 8.00 KiB", [&] { return e2; });
  fake.set(e1, EventState::kDone);
  dog.poll();
  EXPECT_EQ(fake.aborts(), 0);
  fake.advance(7ms);
  fake.set_async_error("remote process exited or there was a network error (NET/IB: peer closed)");
  dog.poll();
  ASSERT_EQ(fake.aborts(), 1);
  const std::string reason = dog.broken();
  EXPECT_TRUE(contains(reason, "NCCL all_reduce #2 (sum of f32 [2048], 8.00 KiB) on rank 1 of 2")) << reason;
  EXPECT_TRUE(contains(reason, "\"remote process exited or there was a network error (NET/IB: peer closed)\""))
      << reason;
  EXPECT_TRUE(contains(reason, "after 7 ms")) << reason;
  // #1 completed before the error and its result stands; #2's does not.
  EXPECT_TRUE(dog.check(1, "all_reduce"));
  EXPECT_THROW(dog.check(2, "all_reduce"), Error);
}

TEST(NcclWatchdog, AFailedEventAbortsWithCudasReason) {
  FakeBackend fake;
  NcclWatchdog dog(&fake, fake_options(1h));
  const NcclWatchdog::EventId e = fake.record();
  dog.launch("broadcast", "u8 [3], 3 B from rank 0", [&] { return e; });
  fake.set(e, EventState::kFailed);
  dog.poll();
  EXPECT_EQ(fake.aborts(), 1);
  EXPECT_TRUE(contains(dog.broken(), "broadcast #1")) << dog.broken();
  EXPECT_TRUE(contains(dog.broken(), "an illegal memory access was encountered")) << dog.broken();
}

// Ten collectives launched at once, each done 60 ms after the one before: 600 ms in all, six times the
// timeout, and no false alarm; then one stops progressing and times out 100 ms after its predecessor.
TEST(NcclWatchdog, ALongButProgressingQueueDoesNotTimeOut) {
  FakeBackend fake;
  NcclWatchdog dog(&fake, fake_options(100ms));
  std::vector<NcclWatchdog::EventId> events;
  for (int i = 0; i < 12; ++i) {
    events.push_back(fake.record());
    dog.launch("all_reduce", "sum of f32 [6553600], 25.00 MiB", [&] { return events.back(); });
  }
  for (int i = 0; i < 10; ++i) {
    for (int tick = 0; tick < 6; ++tick) {
      fake.advance(10ms);
      dog.poll();
    }
    fake.set(events[static_cast<size_t>(i)], EventState::kDone);
  }
  dog.poll();  // retires #10 at 600 ms
  EXPECT_EQ(fake.aborts(), 0);
  EXPECT_EQ(dog.in_flight(), 2u);
  EXPECT_TRUE(dog.check(10, "all_reduce"));
  // #11 never completes: its clock started when #10 was seen done.
  for (int tick = 0; tick < 10; ++tick) {
    fake.advance(10ms);
    dog.poll();
  }
  EXPECT_EQ(fake.aborts(), 0);
  fake.advance(1ms);
  dog.poll();
  EXPECT_EQ(fake.aborts(), 1);
  EXPECT_TRUE(contains(dog.broken(), "all_reduce #11 ")) << dog.broken();
  EXPECT_TRUE(contains(dog.broken(), "did not complete in 101 ms")) << dog.broken();
}

TEST(NcclWatchdog, AFailedLaunchTracksNothing) {
  FakeBackend fake;
  NcclWatchdog dog(&fake, fake_options());
  EXPECT_THROW(dog.launch("all_reduce", "sum of f32 [1], 4 B",
                          []() -> NcclWatchdog::EventId { MT_THROW("ncclAllReduce failed: invalid argument"); }),
               Error);
  EXPECT_EQ(dog.in_flight(), 0u);
  EXPECT_EQ(dog.broken(), "");
  EXPECT_EQ(dog.launch("all_reduce", "sum of f32 [1], 4 B", [&] { return fake.record(); }), 1u);
}

TEST(NcclWatchdog, DrainWaitsForTheCollectivesInFlightWithTheTimeout) {
  FakeBackend done;
  {
    NcclWatchdog dog(&done, fake_options());
    const NcclWatchdog::EventId e = done.record();
    dog.launch("all_reduce", "sum of f32 [1], 4 B", [&] { return e; });
    done.set(e, EventState::kDone);
    EXPECT_TRUE(dog.drain());  // the communicator may be destroyed normally
  }
  EXPECT_EQ(done.aborts(), 0);
  FakeBackend stuck;
  NcclWatchdog dog(&stuck, fake_options(30ms));
  dog.launch("all_reduce", "sum of f32 [1], 4 B", [&] { return stuck.record(); });
  EXPECT_FALSE(dog.drain());  // gave up after the timeout: aborted
  EXPECT_EQ(stuck.aborts(), 1);
  EXPECT_GT(stuck.now() - stuck.start(), 30ms);
}

// The thread aborts a stuck collective on its own, while the caller blocks elsewhere (in a host read that
// the abort releases), and it does not poll NCCL while nothing is in flight.
TEST(NcclWatchdog, TheThreadAbortsWithoutAnyHostWait) {
  FakeBackend fake(/*real_clock=*/true);
  std::atomic<int> reports{0};
  NcclWatchdog dog(&fake, {.timeout = 20ms,
                           .thread_interval = 1ms,
                           .host_interval = 1ms,
                           .rank = 0,
                           .size = 2,
                           .device = "cuda:0",
                           .thread = WatchdogThread::kRun,
                           .on_abort = [&](const std::string&) { ++reports; }});
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(fake.async_queries(), 0);
  const auto launched = std::chrono::steady_clock::now();
  dog.launch("all_gather", "f32 [4], 16 B", [&] { return fake.record(); });
  while (dog.broken().empty() && std::chrono::steady_clock::now() - launched < 2s) std::this_thread::sleep_for(1ms);
  const auto took = std::chrono::steady_clock::now() - launched;
  ASSERT_FALSE(dog.broken().empty()) << "the watchdog thread did not abort within 2 s";
  EXPECT_GE(took, 20ms);
  EXPECT_TRUE(contains(dog.broken(), "all_gather #1 (f32 [4], 16 B) on rank 0 of 2")) << dog.broken();
  EXPECT_EQ(fake.aborts(), 1);
  EXPECT_EQ(reports.load(), 1);
}

}  // namespace
}  // namespace mantissa::dist_detail
