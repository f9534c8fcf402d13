// Host reads of tensor values: observable, and one that does not wait.
//
// A value the host reads from a GPU tensor makes it wait until the GPU has got there (a synchronization),
// so a loop meant to run ahead of its device must read only where it means to. Every read through the
// tensor API tells the calling thread's observer, which tests install to count the reads and see where
// they happen:
//   kItem          Tensor::item(), on any device
//   kDeviceToHost  a copy from a GPU to the host (a GPU item() reports kItem, then this)
//   kSynchronize   gpu::synchronize: the host waits for a stream
//   kHostCopyWait  HostCopy::wait(), the read that was planned for (below)
//
// HostCopy is how a loop reads without waiting: it starts copying a small tensor (a step's loss, grad norm,
// skip flag) into pinned host memory behind an event, on the source's stream, and wait() is called a step
// or more later, when the copy has long landed.
//
//   HostCopy values(stack({loss, norm}));   // enqueued; the host goes on with the next step
//   ...
//   const double* v = values.wait().data<double>();
#pragma once

#include <functional>
#include <memory>

#include "framework/tensor.h"

namespace mantissa {

namespace gpu {
class CopyToHost;  // framework/cuda/transfer.h
}  // namespace gpu

enum class HostRead { kItem, kDeviceToHost, kSynchronize, kHostCopyWait };
const char* host_read_name(HostRead read);  // "item", "device-to-host", "synchronize", "host-copy-wait"

using HostReadObserver = std::function<void(HostRead read)>;

// Installs `observer` for the calling thread for the guard's lifetime (the previous one comes back after).
class ScopedHostReadObserver {
 public:
  explicit ScopedHostReadObserver(HostReadObserver observer);
  ~ScopedHostReadObserver();
  ScopedHostReadObserver(const ScopedHostReadObserver&) = delete;
  ScopedHostReadObserver& operator=(const ScopedHostReadObserver&) = delete;

 private:
  HostReadObserver previous_;
};

// Tells the calling thread's observer, if any (the read paths of the framework call it).
void notify_host_read(HostRead read);

// A copy of a tensor to the host that does not wait for it (see the top of this file).
class HostCopy {
 public:
  HostCopy();
  // Starts copying `src`: from a GPU asynchronously on its current stream into pinned memory, followed by
  // an event; from the CPU at once (a copy, so that later writes to `src` do not show).
  explicit HostCopy(const Tensor& src);
  ~HostCopy();
  HostCopy(HostCopy&& other) noexcept;
  HostCopy& operator=(HostCopy&& other) noexcept;
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;

  bool defined() const { return host_.defined(); }
  // Whether the copy has landed (wait() would return at once).
  bool ready() const;
  // The contiguous CPU tensor, once the copy has landed: blocks until then, reports kHostCopyWait.
  const Tensor& wait();

 private:
  void release();
  void release_quietly() noexcept;  // release(), a device error left to be raised where the work is read
  Tensor host_;
  Tensor source_;                               // a GPU source stays allocated until the copy has read it
  std::unique_ptr<gpu::CopyToHost> in_flight_;  // the GPU copy; null once waited, and for a CPU copy
};

}  // namespace mantissa
