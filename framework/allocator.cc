// Caching CPU allocator: blocks are rounded to a size class (powers of two split into four steps) and
// kept on a per-class free list when released. Blocks over 1 GiB bypass the cache.
#include "framework/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "framework/error.h"
#include "framework/profiler/profiler.h"

namespace mantissa {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMaxCached = size_t{1} << 30;

// Rounds up to 64 bytes below 4 KiB, else to one of four steps per power of two (at most 25% waste).
size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= 4096) return (n + 63) & ~size_t{63};
  const size_t p = std::bit_floor(n);
  const size_t step = p / 4;
  return (n + step - 1) / step * step;
}

class CachingCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    const size_t cls = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= cls;
        add_allocated(cls);
        ++stats_.cache_hits;
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, cls);
    if (p == nullptr) {
      empty_cache();
      p = std::aligned_alloc(kAlignment, cls);
    }
    MT_CHECK(p != nullptr, "out of memory: could not allocate ", nbytes, " bytes on the CPU");
    std::lock_guard<std::mutex> lock(mu_);
    add_allocated(cls);
    ++stats_.system_allocations;
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    const size_t cls = size_class(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.allocated_bytes -= cls;
    if (cls > kMaxCached) {
      std::free(ptr);
      record(-static_cast<int64_t>(cls));
      return;
    }
    free_[cls].push_back(ptr);
    stats_.cached_bytes += cls;
    record(-static_cast<int64_t>(cls));
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_) {
      for (void* p : blocks) std::free(p);
      stats_.cached_bytes -= cls * blocks.size();
      blocks.clear();
    }
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

 private:
  void add_allocated(size_t cls) {  // with mu_ held
    stats_.allocated_bytes += cls;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    record(static_cast<int64_t>(cls));
  }

  // The profiler's memory track: the totals after each allocation and free (with mu_ held, so in order).
  void record(int64_t bytes) {
    if (profiler::is_enabled()) {
      profiler::record_memory(kCPU, bytes, stats_.allocated_bytes, stats_.allocated_bytes + stats_.cached_bytes);
    }
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

CachingCpuAllocator& instance() {
  // Leaked on purpose: tensors in static objects may be freed after main returns.
  static auto* a = new CachingCpuAllocator();
  return *a;
}

}  // namespace

Allocator* cpu_allocator() { return &instance(); }
AllocatorStats cpu_allocator_stats() { return instance().stats(); }
void cpu_allocator_empty_cache() { instance().empty_cache(); }
void cpu_allocator_reset_peak() { instance().reset_peak(); }

}  // namespace mantissa
