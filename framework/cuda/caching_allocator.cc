// The caching allocator's bookkeeping (see caching_allocator.h); no CUDA calls here.
#include "framework/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "framework/error.h"
#include "framework/profiler/profiler.h"

namespace mantissa::gpu {

size_t round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::string format_bytes(uint64_t nbytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(nbytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(nbytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

// Pools are ordered by (stream, size, address): lower_bound finds the smallest block on a stream that fits.
bool CachingAllocatorCore::BlockLess::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

CachingAllocatorCore::CachingAllocatorCore(AllocatorBackend* backend, std::string device)
    : backend_(backend), device_(std::move(device)) {}

CachingAllocatorCore::~CachingAllocatorCore() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached();
  // What is left is in use (or a part of a segment in use): forget the bookkeeping, keep the memory.
  for (Pool* pool : {&small_, &large_}) {
    for (Block* b : *pool) delete b;
    pool->clear();
  }
  for (auto& [ptr, b] : active_) delete b;
  active_.clear();
}

void CachingAllocatorCore::add_allocated(int64_t delta) {
  stats_.allocated_bytes += static_cast<uint64_t>(delta);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  // The profiler's memory track (written for the GPU: no device has run it yet); pinned host memory is not
  // a device's.
  if (profiler::is_enabled() && device_.starts_with("cuda:")) {
    profiler::record_memory(::mantissa::cuda(std::stoi(device_.substr(5))), delta, stats_.allocated_bytes,
                            stats_.reserved_bytes);
  }
}

void CachingAllocatorCore::add_reserved(int64_t delta) {
  stats_.reserved_bytes += static_cast<uint64_t>(delta);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
}

CachingAllocatorCore::Block* CachingAllocatorCore::find_free(Pool& pool, StreamId stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

void* CachingAllocatorCore::backend_malloc_with_retry(size_t size, size_t requested) {
  void* p = backend_->malloc(size);
  if (p == nullptr) {
    // Cached blocks may be what fills the device: give them back and try once more.
    ++stats_.oom_retries;
    release_cached();
    p = backend_->malloc(size);
  }
  if (p == nullptr) {
    ++stats_.ooms;
    const uint64_t cached = stats_.reserved_bytes - stats_.allocated_bytes;
    MT_THROW("out of memory on ", device_, ": tried to allocate ", format_bytes(requested), " (a segment of ",
             format_bytes(size), "); ", format_bytes(stats_.reserved_bytes), " reserved by the caching allocator, ",
             format_bytes(stats_.allocated_bytes), " allocated to tensors, ", format_bytes(cached),
             " cached in partly used segments; peak allocated ", format_bytes(stats_.peak_allocated_bytes),
             ". HINT: use a smaller batch or model, or free tensors you no longer need");
  }
  ++stats_.device_mallocs;
  add_reserved(static_cast<int64_t>(size));
  return p;
}

void* CachingAllocatorCore::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocations;
  process_events();
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  Pool& pool = small ? small_ : large_;
  Block* b = find_free(pool, stream, size);
  if (b != nullptr) {
    ++stats_.cache_hits;
  } else {
    const size_t seg = segment_size(size);
    b = new Block;
    b->size = seg;
    b->ptr = static_cast<char*>(backend_malloc_with_retry(seg, nbytes));
    b->stream = stream;
    b->small = small;
  }
  // Split off the tail when it is worth keeping: any 512 B in the small pool; over 1 MiB in the large
  // one (a smaller tail could only serve small requests, which never come to the large pool).
  const size_t remaining = b->size - size;
  if ((small && remaining >= kMinBlockSize) || (!small && remaining > kSmallSize)) {
    Block* tail = new Block;
    tail->size = remaining;
    tail->ptr = b->ptr + size;
    tail->stream = stream;
    tail->small = small;
    tail->prev = b;
    tail->next = b->next;
    if (b->next != nullptr) b->next->prev = tail;
    b->next = tail;
    b->size = size;
    pool.insert(tail);
  }
  b->allocated = true;
  active_[b->ptr] = b;
  add_allocated(static_cast<int64_t>(b->size));
  return b->ptr;
}

void CachingAllocatorCore::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  MT_ASSERT(it != active_.end(), "caching allocator (", device_, "): freeing a pointer it did not hand out");
  Block* b = it->second;
  active_.erase(it);
  b->allocated = false;
  add_allocated(-static_cast<int64_t>(b->size));
  if (b->other_streams.empty()) {
    free_block(b);
    return;
  }
  // Used on other streams: reusable once the work queued there by now has run.
  for (StreamId s : b->other_streams) {
    pending_.emplace_back(backend_->record_event(s), b);
    ++b->pending_events;
  }
  b->other_streams.clear();
}

void CachingAllocatorCore::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(ptr);
  MT_CHECK(it != active_.end(), "record_stream: ", device_,
           " pointer is not the start of a live block of the caching allocator");
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->other_streams.begin(), b->other_streams.end(), stream) == b->other_streams.end()) {
    b->other_streams.push_back(stream);
  }
}

bool CachingAllocatorCore::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_.count(ptr) != 0;
}

void CachingAllocatorCore::free_block(Block* b) {
  Pool& pool = pool_for(b);
  // Neighbours in a segment share its stream and pool; merge with those that are free.
  if (b->prev != nullptr && b->prev->is_free()) {
    Block* p = b->prev;
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    delete b;
    b = p;
  }
  if (b->next != nullptr && b->next->is_free()) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    delete n;
  }
  pool.insert(b);
}

void CachingAllocatorCore::process_events() {
  auto done = [&](const std::pair<EventId, Block*>& e) {
    if (!backend_->event_done(e.first)) return false;
    backend_->destroy_event(e.first);
    if (--e.second->pending_events == 0) free_block(e.second);
    return true;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), done), pending_.end());
}

void CachingAllocatorCore::release_cached() {
  for (auto& [event, b] : pending_) {
    backend_->wait_event(event);
    backend_->destroy_event(event);
    if (--b->pending_events == 0) free_block(b);
  }
  pending_.clear();
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev != nullptr || b->next != nullptr) {  // part of a segment still in use
        ++it;
        continue;
      }
      backend_->free(b->ptr);
      ++stats_.device_frees;
      add_reserved(-static_cast<int64_t>(b->size));
      it = pool->erase(it);
      delete b;
    }
  }
}

void CachingAllocatorCore::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cached();
}

void CachingAllocatorCore::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

CachingAllocatorStats CachingAllocatorCore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace mantissa::gpu
