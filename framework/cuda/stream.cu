// Per-device default streams, per-thread current streams, device guards.
#include <array>
#include <atomic>
#include <mutex>

#include "framework/cuda/check.h"
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"
#include "framework/host_read.h"

namespace mantissa::gpu {
namespace {

constexpr int kMaxDevices = 64;

// This thread's replacements of the default stream, per device (nullptr: use the default stream).
thread_local std::array<cudaStream_t, kMaxDevices> t_current{};

void check_device(int device) {
  MT_CHECK(device >= 0 && device < cuda_device_count() && device < kMaxDevices, "cuda: no CUDA device ", device, " (",
           cuda_device_count(), " present", cuda_device_count() == 0 ? ": " + cuda_unavailable_reason() : std::string(),
           ")");
}

}  // namespace

cudaStream_t default_stream(int device) {
  check_device(device);
  static std::array<cudaStream_t, kMaxDevices> streams{};
  static std::array<std::once_flag, kMaxDevices> once;
  std::call_once(once[device], [device] {
    DeviceGuard guard(device);
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  });
  return streams[device];
}

cudaStream_t current_stream(int device) {
  check_device(device);
  const cudaStream_t s = t_current[device];
  return s != nullptr ? s : default_stream(device);
}

StreamGuard::StreamGuard(int device, cudaStream_t stream) : device_(device) {
  check_device(device);
  previous_ = t_current[device];
  t_current[device] = stream;
}

StreamGuard::~StreamGuard() { t_current[device_] = previous_; }

DeviceGuard::DeviceGuard(int device) {
  check_device(device);
  MT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) MT_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() { (void)cudaSetDevice(previous_); }

int multiprocessor_count(int device) {
  check_device(device);
  static std::array<std::atomic<int>, kMaxDevices> counts{};
  int n = counts[device].load(std::memory_order_relaxed);
  if (n == 0) {
    MT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

void synchronize(int device) {
  notify_host_read(HostRead::kSynchronize);
  DeviceGuard guard(device);
  MT_CUDA_CHECK(cudaStreamSynchronize(current_stream(device)));
}

}  // namespace mantissa::gpu
