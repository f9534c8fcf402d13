// The caching CPU allocator: size classes and alignment, reuse of freed blocks, a steady-state loop
// that takes no memory from the operating system (and so causes no page faults), and empty_cache.
#include "framework/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include "framework/tensor.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// One "training step" worth of allocations: about 1.5 MiB of activations of mixed sizes and dtypes,
// temporaries from the ops, all freed at the end. Returns something so the work is not optimised away.
double step() {
  const Tensor x = full({128, 784}, 0.5);
  const Tensor w = full({512, 512}, 0.25, {.dtype = DType::kBF16});
  const Tensor h = relu(x * 2.0 + 1.0);
  const Tensor wf = w.to(DType::kF32);
  const Tensor small = ones({10});
  return sum(h).item() + sum(wf).item() + sum(small).item();
}

TEST(CpuAllocator, BlocksAreAlignedAndRoundedToSizeClasses) {
  Allocator* a = cpu_allocator();
  const AllocatorStats before = cpu_allocator_stats();
  void* p1 = a->allocate(1);
  void* p2 = a->allocate(5000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p1) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p2) % 64, 0u);
  // 1 byte takes a 64-byte block; 5000 bytes a 5120-byte one (4096 + one step of 1024).
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes - before.allocated_bytes, 64u + 5120u);
  a->deallocate(p2, 5000);
  // 5100 bytes is in the same class: the freed block comes back without asking the system.
  const AllocatorStats mid = cpu_allocator_stats();
  void* p3 = a->allocate(5100);
  EXPECT_EQ(p3, p2);
  EXPECT_EQ(cpu_allocator_stats().cache_hits, mid.cache_hits + 1);
  EXPECT_EQ(cpu_allocator_stats().system_allocations, mid.system_allocations);
  a->deallocate(p3, 5100);
  a->deallocate(p1, 1);
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes, before.allocated_bytes);
}

TEST(CpuAllocator, SteadyStateTakesNoMemoryFromTheSystem) {
  const double want = step();  // warm-up: fills the cache with every size the step needs
  step();
  const AllocatorStats warm = cpu_allocator_stats();
  const long faults_before = minor_page_faults();
  for (int i = 0; i < 10; ++i) ASSERT_EQ(step(), want);
  const long faults = minor_page_faults() - faults_before;
  const AllocatorStats after = cpu_allocator_stats();
  EXPECT_EQ(after.system_allocations, warm.system_allocations);
  EXPECT_GT(after.cache_hits, warm.cache_hits + 10 * 5) << "every tensor of every step came from the cache";
  EXPECT_EQ(after.allocated_bytes, warm.allocated_bytes);
  // Each step touches about 1.5 MiB (400 pages). Emptying the cache after every step makes these 10
  // steps fault several hundred times here; with the cache only stray faults (stacks, small heap) remain.
  EXPECT_LT(faults, 100) << "page faults in 10 steady-state steps";
}

TEST(CpuAllocator, EmptyCacheReturnsMemoryToTheSystem) {
  step();
  const AllocatorStats cached = cpu_allocator_stats();
  EXPECT_GT(cached.cached_bytes, 1u << 20) << "the step's blocks should be cached";
  cpu_allocator_empty_cache();
  const AllocatorStats emptied = cpu_allocator_stats();
  EXPECT_EQ(emptied.cached_bytes, 0u);
  EXPECT_EQ(emptied.allocated_bytes, cached.allocated_bytes);
  step();  // with an empty cache the step has to ask the system again
  EXPECT_GT(cpu_allocator_stats().system_allocations, emptied.system_allocations);
}

TEST(CpuAllocator, LiveTensorsAreCountedAndReturned) {
  const AllocatorStats before = cpu_allocator_stats();
  {
    const Tensor t = empty({1000}, {.dtype = DType::kF64});  // 8000 bytes: the 8192 class
    EXPECT_EQ(cpu_allocator_stats().allocated_bytes, before.allocated_bytes + 8192);
    const Tensor v = t.view({10, 100}).t();  // views share the block
    EXPECT_EQ(cpu_allocator_stats().allocated_bytes, before.allocated_bytes + 8192);
  }
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes, before.allocated_bytes);
}

TEST(CpuAllocator, ConcurrentUseKeepsTheBooksBalanced) {
  const AllocatorStats before = cpu_allocator_stats();
  auto worker = [](size_t seed) {
    Allocator* a = cpu_allocator();
    std::vector<std::pair<void*, size_t>> live;
    for (size_t i = 0; i < 2000; ++i) {
      const size_t n = 64 + (seed * 7919 + i * 104729) % 20000;
      live.emplace_back(a->allocate(n), n);
      static_cast<char*>(live.back().first)[n - 1] = 1;  // the whole block is usable
      if (live.size() > 16) {
        a->deallocate(live.front().first, live.front().second);
        live.erase(live.begin());
      }
    }
    for (auto& [p, n] : live) a->deallocate(p, n);
  };
  std::thread t1(worker, 1), t2(worker, 2);
  worker(3);
  t1.join();
  t2.join();
  EXPECT_EQ(cpu_allocator_stats().allocated_bytes, before.allocated_bytes);
}

}  // namespace
}  // namespace mantissa
