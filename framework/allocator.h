// Allocators. The CPU allocator caches freed blocks by size class, so a training loop in steady state
// (the same shapes every step) takes no memory from the operating system and triggers no page faults.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mantissa {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory aligned to 64 bytes, or throws mantissa::Error when the system has none left.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

struct AllocatorStats {
  uint64_t allocated_bytes = 0;       // held by live tensors (rounded to the size class)
  uint64_t cached_bytes = 0;          // freed by tensors, kept for reuse
  uint64_t system_allocations = 0;    // calls that went to the operating system
  uint64_t cache_hits = 0;            // allocations served from the cache
  uint64_t peak_allocated_bytes = 0;  // the most allocated_bytes has been since start (or the last reset)
};

// The process-wide caching CPU allocator.
Allocator* cpu_allocator();
AllocatorStats cpu_allocator_stats();
// Returns every cached block to the operating system.
void cpu_allocator_empty_cache();
// Starts peak_allocated_bytes again from what is allocated now (to measure one phase, e.g. a training step).
void cpu_allocator_reset_peak();

}  // namespace mantissa
