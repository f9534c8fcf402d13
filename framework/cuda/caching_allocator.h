// The bookkeeping of the caching device allocator, apart from CUDA: size rounding, segments, best-fit
// reuse, splitting and merging, per-stream pools, deferred frees behind events, statistics. The memory and
// event calls go through AllocatorBackend, so tests drive all of it on the CPU with a fake backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mantissa::gpu {

using StreamId = uint64_t;  // a cudaStream_t as an integer; the core only compares them
using EventId = uint64_t;   // the backend's handle of a recorded event

class AllocatorBackend {
 public:
  virtual ~AllocatorBackend() = default;
  virtual void* malloc(size_t nbytes) = 0;  // nullptr when the device is out of memory
  virtual void free(void* ptr) = 0;
  // An event that completes once all the work queued on `stream` so far has run.
  virtual EventId record_event(StreamId stream) = 0;
  virtual bool event_done(EventId event) = 0;
  virtual void wait_event(EventId event) = 0;  // blocks the host until the event completes
  virtual void destroy_event(EventId event) = 0;
};

struct CachingAllocatorStats {
  uint64_t allocated_bytes = 0;       // in blocks handed to tensors (rounded sizes)
  uint64_t reserved_bytes = 0;        // in segments taken from the backend (cudaMalloc)
  uint64_t peak_allocated_bytes = 0;  // since construction or reset_peak_stats()
  uint64_t peak_reserved_bytes = 0;
  uint64_t allocations = 0;     // allocate() calls
  uint64_t cache_hits = 0;      // allocations served from a cached block
  uint64_t device_mallocs = 0;  // backend malloc calls that succeeded
  uint64_t device_frees = 0;
  uint64_t oom_retries = 0;  // a malloc failed, the cache was released and malloc tried again
  uint64_t ooms = 0;         // allocations that failed even after the retry
};

// Sizes (PyTorch's scheme): requests round up to 512 B. Requests up to 1 MiB ("small") are carved from
// 2 MiB segments; larger ones from a 20 MiB segment when under 10 MiB, else from a segment of their size
// rounded up to 2 MiB. Small and large blocks live in separate pools.
inline constexpr size_t kMinBlockSize = 512;
inline constexpr size_t kSmallSize = size_t{1} << 20;
inline constexpr size_t kSmallSegment = size_t{2} << 20;
inline constexpr size_t kMinLargeAlloc = size_t{10} << 20;
inline constexpr size_t kLargeSegment = size_t{20} << 20;
inline constexpr size_t kRoundLarge = size_t{2} << 20;

size_t round_size(size_t nbytes);
size_t segment_size(size_t rounded);
std::string format_bytes(uint64_t nbytes);  // "1.50 MiB"

// Stream rules: a block belongs to the stream it was allocated on and, once freed, is reused only for
// allocations on that stream (work queued there runs in order, so no wait is needed). A block also used
// on other streams (record_stream) is held back when freed until an event recorded on each of those
// streams at free time has completed. Thread-safe.
class CachingAllocatorCore {
 public:
  // `device` names the memory in errors ("cuda:0", "pinned host memory").
  CachingAllocatorCore(AllocatorBackend* backend, std::string device);
  ~CachingAllocatorCore();  // returns every segment to the backend (blocks still in use leak)
  CachingAllocatorCore(const CachingAllocatorCore&) = delete;
  CachingAllocatorCore& operator=(const CachingAllocatorCore&) = delete;

  // A block of at least `nbytes` for use on `stream`; nullptr for 0 bytes. When the backend has no
  // memory the cache is released and malloc tried once more; then mantissa::Error names the size, the
  // device and the statistics.
  void* allocate(size_t nbytes, StreamId stream);
  void deallocate(void* ptr);
  // Marks the block at `ptr` (as returned by allocate) as used on `stream` too.
  void record_stream(void* ptr, StreamId stream);
  // Whether `ptr` is the start of a block handed out by allocate() and not yet freed.
  bool owns(const void* ptr) const;
  // Waits for the events of deferred frees, then returns every wholly free segment to the backend.
  void empty_cache();
  void reset_peak_stats();
  CachingAllocatorStats stats() const;

 private:
  struct Block {
    size_t size = 0;
    char* ptr = nullptr;
    StreamId stream = 0;
    bool small = false;  // which pool
    bool allocated = false;
    int pending_events = 0;  // > 0: freed, waiting for other streams
    Block* prev = nullptr;   // neighbours within the segment; null at its ends
    Block* next = nullptr;
    std::vector<StreamId> other_streams;  // record_stream uses
    bool is_free() const { return !allocated && pending_events == 0; }
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Pool& pool_for(const Block* b) { return b->small ? small_ : large_; }
  Block* find_free(Pool& pool, StreamId stream, size_t size);
  void* backend_malloc_with_retry(size_t size, size_t requested);
  void free_block(Block* b);  // merges with free neighbours, back into the pool
  void process_events();      // frees blocks whose events have all completed
  void release_cached();      // empty_cache without the lock
  void add_allocated(int64_t delta);
  void add_reserved(int64_t delta);

  AllocatorBackend* backend_;
  std::string device_;
  mutable std::mutex mu_;
  Pool small_, large_;
  std::unordered_map<const void*, Block*> active_;
  std::vector<std::pair<EventId, Block*>> pending_;  // deferred frees waiting on events
  CachingAllocatorStats stats_;
};

}  // namespace mantissa::gpu
