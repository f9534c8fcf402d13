// The caching allocator's bookkeeping on the CPU: a fake backend hands out addresses from a pretend
// device of fixed capacity and lets the test decide when events complete.
#include "framework/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "framework/error.h"

namespace mantissa::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

class FakeBackend final : public AllocatorBackend {
 public:
  explicit FakeBackend(size_t capacity) : capacity_(capacity) {}

  void* malloc(size_t nbytes) override {
    ++malloc_calls;
    if (used_ + nbytes > capacity_) return nullptr;
    used_ += nbytes;
    // Addresses never repeat and segments never touch, so a merge across segments would show.
    void* p = reinterpret_cast<void*>(next_);
    next_ += nbytes + kMiB;
    live_[p] = nbytes;
    return p;
  }
  void free(void* ptr) override {
    auto it = live_.find(ptr);
    ASSERT_NE(it, live_.end()) << "freeing an address the backend never gave out";
    used_ -= it->second;
    live_.erase(it);
  }
  EventId record_event(StreamId stream) override {
    events_[++last_event_] = false;
    recorded_on.push_back(stream);
    return last_event_;
  }
  bool event_done(EventId e) override { return events_.at(e); }
  void wait_event(EventId e) override { events_.at(e) = true; }
  void destroy_event(EventId e) override { events_.erase(e); }

  void complete_all_events() {
    for (auto& [e, done] : events_) done = true;
  }
  size_t live_events() const { return events_.size(); }
  size_t used() const { return used_; }

  int malloc_calls = 0;
  std::vector<StreamId> recorded_on;

 private:
  size_t capacity_;
  size_t used_ = 0;
  uintptr_t next_ = uintptr_t{1} << 32;
  std::map<void*, size_t> live_;
  std::map<EventId, bool> events_;
  EventId last_event_ = 0;
};

constexpr StreamId kS1 = 101, kS2 = 202;

char* as_bytes(void* p) { return static_cast<char*>(p); }

TEST(CachingAllocator, RoundsTo512AndPicksSegmentSizes) {
  EXPECT_EQ(round_size(1), 512u);
  EXPECT_EQ(round_size(512), 512u);
  EXPECT_EQ(round_size(513), 1024u);
  EXPECT_EQ(round_size(kMiB + 1), kMiB + 512);
  EXPECT_EQ(segment_size(512), 2 * kMiB);          // small: carved from 2 MiB segments
  EXPECT_EQ(segment_size(kMiB), 2 * kMiB);         // 1 MiB is still small
  EXPECT_EQ(segment_size(kMiB + 512), 20 * kMiB);  // medium: 20 MiB segments
  EXPECT_EQ(segment_size(10 * kMiB), 10 * kMiB);   // large: its own size, rounded to 2 MiB
  EXPECT_EQ(segment_size(11 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(format_bytes(3 * kMiB / 2), "1.50 MiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

TEST(CachingAllocator, SmallBlocksAreCarvedFromOneSegment) {
  FakeBackend backend(64 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  void* p = a.allocate(1000, kS1);
  void* q = a.allocate(1000, kS1);
  void* r = a.allocate(100, kS1);
  EXPECT_EQ(backend.malloc_calls, 1);
  EXPECT_EQ(as_bytes(q), as_bytes(p) + 1024);  // 1000 rounds to 1024; the tail of the split follows
  EXPECT_EQ(as_bytes(r), as_bytes(q) + 1024);
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u + 1024u + 512u);
  EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
  EXPECT_EQ(s.device_mallocs, 1u);
  EXPECT_EQ(s.cache_hits, 2u);
  EXPECT_TRUE(a.owns(q));
  EXPECT_FALSE(a.owns(as_bytes(q) + 512));
  a.deallocate(p);
  a.deallocate(q);
  a.deallocate(r);
  EXPECT_EQ(a.stats().allocated_bytes, 0u);
}

TEST(CachingAllocator, BestFitReusesTheSmallestFreeBlock) {
  FakeBackend backend(64 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  void* big = a.allocate(8192, kS1);
  void* sep1 = a.allocate(512, kS1);  // keeps the freed blocks from merging
  void* mid = a.allocate(2048, kS1);
  void* sep2 = a.allocate(512, kS1);
  a.deallocate(big);
  a.deallocate(mid);
  // 2000 B fits both holes and the segment's tail; best fit takes the 2048 B one.
  EXPECT_EQ(a.allocate(2000, kS1), mid);
  a.deallocate(sep1);
  a.deallocate(sep2);
  EXPECT_EQ(backend.malloc_calls, 1);
}

TEST(CachingAllocator, FreeNeighboursMergeIntoLargerBlocks) {
  FakeBackend backend(64 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  std::vector<void*> quarters;
  for (int i = 0; i < 4; ++i) quarters.push_back(a.allocate(kMiB / 2, kS1));  // fills one 2 MiB segment
  EXPECT_EQ(backend.malloc_calls, 1);
  // Free in an order that merges on both sides: 1, 3, then 2 joins them, then 0 and the tail.
  for (int i : {1, 3, 2, 0}) a.deallocate(quarters[static_cast<size_t>(i)]);
  // A 1 MiB request fits only if the halves merged back.
  void* whole = a.allocate(kMiB, kS1);
  EXPECT_EQ(whole, quarters[0]);
  EXPECT_EQ(backend.malloc_calls, 1);
  a.deallocate(whole);
  a.empty_cache();  // everything merged into one free segment, which goes back
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(backend.used(), 0u);
}

TEST(CachingAllocator, LargeRequestsShareA20MiBSegment) {
  FakeBackend backend(256 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  void* p = a.allocate(5 * kMiB, kS1);
  void* q = a.allocate(5 * kMiB, kS1);
  EXPECT_EQ(backend.malloc_calls, 1);
  EXPECT_EQ(as_bytes(q), as_bytes(p) + 5 * kMiB);
  void* big = a.allocate(30 * kMiB, kS1);  // >= 10 MiB: a segment of its own size
  EXPECT_EQ(backend.malloc_calls, 2);
  EXPECT_EQ(a.stats().reserved_bytes, 50 * kMiB);
  // A small request never takes large-pool memory, even with 10 MiB free there.
  void* s = a.allocate(4096, kS1);
  EXPECT_EQ(backend.malloc_calls, 3);
  for (void* x : {p, q, big, s}) a.deallocate(x);
}

TEST(CachingAllocator, FreedBlocksStayWithTheirStream) {
  FakeBackend backend(64 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  void* p = a.allocate(4096, kS1);
  a.deallocate(p);
  // Work on kS1 may still be using p; another stream must not get it, its own stream may.
  void* q = a.allocate(4096, kS2);
  EXPECT_NE(q, p);
  EXPECT_EQ(backend.malloc_calls, 2);
  EXPECT_EQ(a.allocate(4096, kS1), p);
  EXPECT_EQ(backend.malloc_calls, 2);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilTheEventCompletes) {
  FakeBackend backend(64 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  void* p = a.allocate(4096, kS1);
  a.record_stream(p, kS2);
  a.record_stream(p, kS2);  // twice is once
  a.record_stream(p, kS1);  // its own stream needs no event
  a.deallocate(p);
  ASSERT_EQ(backend.recorded_on, std::vector<StreamId>{kS2});
  EXPECT_NE(a.allocate(4096, kS1), p) << "reused while kS2 may still read it";
  backend.complete_all_events();
  EXPECT_EQ(a.allocate(4096, kS1), p);
  EXPECT_EQ(backend.live_events(), 0u);  // destroyed once seen complete
}

TEST(CachingAllocator, PeakStatsAndReset) {
  FakeBackend backend(64 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  void* p = a.allocate(3 * kMiB, kS1);
  void* q = a.allocate(kMiB, kS1);
  a.deallocate(p);
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes, kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, 4 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 22 * kMiB);  // a 20 MiB segment and a 2 MiB one
  a.reset_peak_stats();
  EXPECT_EQ(a.stats().peak_allocated_bytes, kMiB);
  a.deallocate(q);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, 22 * kMiB);
  EXPECT_EQ(s.device_frees, 2u);
}

TEST(CachingAllocator, EmptyCacheKeepsSegmentsInUseAndWaitsForEvents) {
  FakeBackend backend(64 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  void* live = a.allocate(1024, kS1);
  void* freed = a.allocate(kMiB + 1, kS1);  // its own 20 MiB segment
  void* deferred = a.allocate(kMiB + 1, kS2);
  a.record_stream(deferred, kS1);
  a.deallocate(freed);
  a.deallocate(deferred);
  a.empty_cache();
  // The deferred block's event was waited for; both 20 MiB segments went back, the live 2 MiB stayed.
  EXPECT_EQ(a.stats().reserved_bytes, 2 * kMiB);
  EXPECT_EQ(backend.used(), 2 * kMiB);
  EXPECT_EQ(backend.live_events(), 0u);
  EXPECT_TRUE(a.owns(live));
  a.deallocate(live);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  FakeBackend backend(24 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:3");
  a.deallocate(a.allocate(12 * kMiB, kS1));  // 12 MiB cached
  void* p = a.allocate(14 * kMiB, kS1);      // 12 + 14 > 24: fails, frees the cache, succeeds
  ASSERT_NE(p, nullptr);
  CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.oom_retries, 1u);
  EXPECT_EQ(s.device_frees, 1u);
  EXPECT_EQ(s.reserved_bytes, 14 * kMiB);
  try {
    a.allocate(14 * kMiB, kS1);
    FAIL() << "a second 14 MiB fits no 24 MiB device";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of memory on cuda:3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tried to allocate 14.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("14.00 MiB reserved"), std::string::npos) << msg;
    EXPECT_NE(msg.find("14.00 MiB allocated"), std::string::npos) << msg;
  }
  s = a.stats();
  EXPECT_EQ(s.ooms, 1u);
  EXPECT_EQ(s.oom_retries, 2u);
  a.deallocate(p);
}

TEST(CachingAllocator, SteadyStateLoopMakesNoNewMallocs) {
  FakeBackend backend(512 * kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  // A pretend training step: activations of assorted sizes, some freed early, the rest at the end.
  const std::vector<size_t> sizes = {4 * kMiB, 700, 64 * 1024, 12 * kMiB + 3, 3 * kMiB, 100, 2 * kMiB};
  int mallocs_after_first = 0;
  for (int step = 0; step < 10; ++step) {
    std::vector<void*> live;
    for (size_t i = 0; i < sizes.size(); ++i) {
      live.push_back(a.allocate(sizes[i], i % 2 ? kS1 : kS2));
      if (i == 3) {
        a.deallocate(live[1]);
        live[1] = nullptr;
      }
    }
    for (void* p : live) a.deallocate(p);
    if (step == 0) mallocs_after_first = backend.malloc_calls;
  }
  EXPECT_EQ(backend.malloc_calls, mallocs_after_first);
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.cache_hits, s.allocations - s.device_mallocs);
  EXPECT_GE(s.cache_hits, 9 * sizes.size());  // every allocation after the first step
}

TEST(CachingAllocator, ZeroBytesIsNull) {
  FakeBackend backend(kMiB);
  CachingAllocatorCore a(&backend, "cuda:0");
  EXPECT_EQ(a.allocate(0, kS1), nullptr);
  a.deallocate(nullptr);
  EXPECT_EQ(backend.malloc_calls, 0);
}

}  // namespace
}  // namespace mantissa::gpu
