// The library workspaces' bookkeeping on the CPU (ops/cuda/workspace_cache.h), over the caching
// allocator's core with a fake backend: a caller's block stays allocated while the caller holds it, even
// when another caller on the same stream grows the workspace meanwhile, and goes back to the stream's pool
// when the last holder lets go.
#include "ops/cuda/workspace_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace mantissa::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr StreamId kS1 = 101, kS2 = 202;

// Addresses that never repeat; events complete at once (every block here is used on its own stream only).
class FakeBackend final : public AllocatorBackend {
 public:
  void* malloc(size_t nbytes) override {
    void* p = reinterpret_cast<void*>(next_);
    next_ += nbytes + kMiB;
    return p;
  }
  void free(void*) override {}
  EventId record_event(StreamId) override { return ++last_event_; }
  bool event_done(EventId) override { return true; }
  void wait_event(EventId) override {}
  void destroy_event(EventId) override {}

 private:
  uintptr_t next_ = uintptr_t{1} << 32;
  EventId last_event_ = 0;
};

// A cache whose blocks come from `core` on the stream asked for, as stream_workspace's come from the
// device's caching allocator under a StreamGuard.
WorkspaceCache cache_over(CachingAllocatorCore& core, int* allocations = nullptr) {
  return WorkspaceCache(
      [&core, allocations](int, StreamId stream, size_t bytes) {
        if (allocations != nullptr) ++*allocations;
        return std::shared_ptr<void>(core.allocate(bytes, stream), [&core](void* p) { core.deallocate(p); });
      },
      4 * kMiB, kMiB);
}

TEST(WorkspaceCache, SizesAreRoundedAndTheBlockIsKept) {
  FakeBackend backend;
  CachingAllocatorCore core(&backend, "fake");
  int allocations = 0;
  WorkspaceCache cache = cache_over(core, &allocations);
  const Workspace a = cache.get(0, kS1, 100);
  EXPECT_EQ(a.bytes(), 4 * kMiB);                           // at least the minimum
  EXPECT_EQ(cache.get(0, kS1, 4 * kMiB).data(), a.data());  // fits: the same block, no allocation
  EXPECT_EQ(allocations, 1);
  const Workspace b = cache.get(0, kS1, 5 * kMiB + 1);
  EXPECT_EQ(b.bytes(), 6 * kMiB);                    // a multiple of the granule
  EXPECT_NE(cache.get(0, kS2, 1).data(), b.data());  // another stream has its own
  EXPECT_NE(cache.get(1, kS1, 1).data(), b.data());  // and another device
  EXPECT_EQ(allocations, 4);
}

TEST(WorkspaceCache, AGrownWorkspaceKeepsTheOldBlockUntilItsHolderLetsGo) {
  FakeBackend backend;
  CachingAllocatorCore core(&backend, "fake");
  WorkspaceCache cache = cache_over(core);
  // Thread A takes the workspace for a GEMM it has not enqueued yet; thread B, on the same stream, grows it.
  Workspace held = cache.get(0, kS1, kMiB);
  void* const old_block = held.data();
  const Workspace grown = cache.get(0, kS1, 16 * kMiB);
  ASSERT_NE(grown.data(), old_block);
  // The old block is still A's: the allocator must not hand it to other work on the stream (which could
  // then be overwritten by A's GEMM).
  EXPECT_TRUE(core.owns(old_block));
  void* const other = core.allocate(4 * kMiB, kS1);
  EXPECT_NE(other, old_block);
  core.deallocate(other);
  // A has enqueued its call and lets go: the block returns to the stream's pool and is reused there.
  held = Workspace();
  EXPECT_FALSE(core.owns(old_block));
  void* const reused = core.allocate(4 * kMiB, kS1);
  EXPECT_EQ(reused, old_block);
  core.deallocate(reused);
}

}  // namespace
}  // namespace mantissa::gpu
