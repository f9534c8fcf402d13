// The scratch memory that CUDA library calls (cuBLASLt, cuBLAS, cuDNN) share per (device, stream), with no
// CUDA headers so that the CPU tests drive its bookkeeping over the caching allocator's fake backend. A
// caller gets a Workspace that owns a reference to the block: when another thread on the same stream (the
// DataLoader shares the default stream) grows the workspace, the old block goes back to the allocator only
// once every caller holding it has let go, that is, after their library calls are enqueued. Blocks belong
// to their stream, so the allocator reuses the old one only for work queued later on that stream, which
// runs after those calls.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "framework/cuda/caching_allocator.h"  // StreamId

namespace mantissa::gpu {

// A block of at least bytes() bytes at data(). Keep it until the library call that uses it is enqueued.
class Workspace {
 public:
  Workspace() = default;
  Workspace(std::shared_ptr<void> block, size_t bytes) : block_(std::move(block)), bytes_(bytes) {}
  void* data() const { return block_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> block_;  // its deleter hands the memory back (a Tensor's storage on the GPU)
  size_t bytes_ = 0;
};

// One growing workspace per (device, stream). Thread-safe.
class WorkspaceCache {
 public:
  // A block of `bytes` for use on `stream` of `device`, freed when the last shared_ptr to it goes.
  using Allocate = std::function<std::shared_ptr<void>(int device, StreamId stream, size_t bytes)>;

  // Blocks are at least `min_bytes` (what a GEMM wants anyway, so that it rarely grows) and a multiple of
  // `granule` bytes.
  WorkspaceCache(Allocate allocate, size_t min_bytes, size_t granule)
      : allocate_(std::move(allocate)), min_bytes_(min_bytes), granule_(granule) {}

  // The stream's workspace, grown first when it is smaller than `bytes`.
  Workspace get(int device, StreamId stream, size_t bytes) {
    Workspace replaced;  // released after the lock: its deleter calls into the allocator
    std::lock_guard<std::mutex> lock(mu_);
    Workspace& w = blocks_[{device, stream}];
    if (w.data() == nullptr || w.bytes() < bytes) {
      const size_t wanted = bytes > min_bytes_ ? bytes : min_bytes_;
      const size_t rounded = (wanted + granule_ - 1) / granule_ * granule_;
      Workspace grown(allocate_(device, stream, rounded), rounded);
      replaced = std::exchange(w, std::move(grown));
    }
    return w;
  }

 private:
  Allocate allocate_;
  size_t min_bytes_, granule_;
  std::mutex mu_;
  std::map<std::pair<int, StreamId>, Workspace> blocks_;
};

}  // namespace mantissa::gpu
