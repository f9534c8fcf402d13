// The host-read observer and HostCopy (its GPU side is gpu::start_copy_to_host, framework/cuda/transfer.h).
#include "framework/host_read.h"

#include <utility>

#include "framework/cuda/allocator.h"
#include "framework/cuda/transfer.h"
#include "framework/device_kernels.h"
#include "framework/error.h"

namespace mantissa {
namespace {

thread_local HostReadObserver t_observer;

// A copy from the CPU is made at once (copy_); only a GPU source has a copy in flight.
constexpr DeviceKernels<decltype(gpu::start_copy_to_host)> kStartCopyToHost{
    .cuda = MT_CUDA_KERNEL(gpu::start_copy_to_host)};

}  // namespace

const char* host_read_name(HostRead read) {
  switch (read) {
    case HostRead::kItem: return "item";
    case HostRead::kDeviceToHost: return "device-to-host";
    case HostRead::kSynchronize: return "synchronize";
    case HostRead::kHostCopyWait: return "host-copy-wait";
  }
  return "?";
}

ScopedHostReadObserver::ScopedHostReadObserver(HostReadObserver observer) : previous_(std::move(t_observer)) {
  t_observer = std::move(observer);
}

ScopedHostReadObserver::~ScopedHostReadObserver() { t_observer = std::move(previous_); }

void notify_host_read(HostRead read) {
  if (t_observer) t_observer(read);
}

HostCopy::HostCopy() = default;  // here, where gpu::CopyToHost is a complete type

HostCopy::HostCopy(const Tensor& src) {
  MT_CHECK(src.defined(), "HostCopy: the tensor to copy is undefined");
  if (src.device().is_cpu()) {
    host_ = empty(src.shape(), {.dtype = src.dtype()});
    copy_(host_, src);
    return;
  }
  auto* start = kernel_for("HostCopy", kStartCopyToHost, src.device());
  source_ = src.contiguous();
  host_ = empty_pinned(src.shape(), src.dtype());
  in_flight_ = start(host_, source_);
}

HostCopy::~HostCopy() { release_quietly(); }

void HostCopy::release_quietly() noexcept {
  try {
    release();
  } catch (const Error&) {
    // The device failed (its error was or will be raised where the work is read); nothing to free here.
  }
}

HostCopy::HostCopy(HostCopy&& other) noexcept
    : host_(std::move(other.host_)), source_(std::move(other.source_)), in_flight_(std::move(other.in_flight_)) {}

HostCopy& HostCopy::operator=(HostCopy&& other) noexcept {
  if (this != &other) {
    release_quietly();
    host_ = std::move(other.host_);
    source_ = std::move(other.source_);
    in_flight_ = std::move(other.in_flight_);
  }
  return *this;
}

// An abandoned copy (the loop threw before reading it) waits for its event before the pinned block goes
// back to the allocator, so that no later copy lands in memory this one still writes.
void HostCopy::release() {
  if (in_flight_ != nullptr) {
    in_flight_->wait();
    in_flight_.reset();
  }
  source_ = Tensor();
}

bool HostCopy::ready() const {
  MT_CHECK(defined(), "HostCopy::ready: nothing was copied");
  return in_flight_ == nullptr || in_flight_->done();
}

const Tensor& HostCopy::wait() {
  MT_CHECK(defined(), "HostCopy::wait: nothing was copied");
  notify_host_read(HostRead::kHostCopyWait);
  release();
  return host_;
}

}  // namespace mantissa
