// Streams and the current device for CUDA work. Every launch in mantissa goes to current_stream(device):
// by default one non-blocking stream per device, shared by all threads of the process (so work queued by
// the DataLoader thread and the training thread is ordered), replaceable per thread with StreamGuard
// (side streams for DDP's all-reduce, CUDA graph capture). A CUDA header: only files that CMake compiles
// with CUDA alone (.cu, */cuda/host/*.cc) include it.
#pragma once

#include <cuda_runtime_api.h>

#include "framework/device.h"

namespace mantissa {
class Tensor;
}  // namespace mantissa

namespace mantissa::gpu {

// The stream this thread launches work for GPU `device` on.
cudaStream_t current_stream(int device);
inline cudaStream_t current_stream(Device device) { return current_stream(device.index); }
// The process-wide default stream of `device` (created on first use, never destroyed).
cudaStream_t default_stream(int device);

// Makes `stream` this thread's current stream for `device` for the guard's lifetime.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

// Makes `device` the calling thread's current CUDA device for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  explicit DeviceGuard(Device device) : DeviceGuard(static_cast<int>(device.index)) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// The number of streaming multiprocessors of `device` (asked once, then cached): sizes grids that must fill
// the GPU.
int multiprocessor_count(int device);

// Waits until all work queued on `device`'s current stream is done (a host synchronization).
void synchronize(int device);

// Marks `t`'s storage as used on `stream` as well as on the stream it was allocated on: when freed, the
// block is reused only after the work queued on `stream` by then has run. Needed when a tensor made on one
// stream is consumed on another (side streams of DDP, copies). For a pinned CPU tensor: the same, so
// a staging buffer is not reused before an asynchronous copy from it has finished. Defined with the
// caching allocators (framework/cuda/host/allocator.cc).
void record_stream(const Tensor& t, cudaStream_t stream);

}  // namespace mantissa::gpu
