// The host-read observer and HostCopy (its GPU side is in framework/cuda/transfer.cc).
#include "framework/host_read.h"

#include <utility>

#include "framework/error.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/allocator.h"
#include "framework/cuda/transfer.h"
#endif

namespace mantissa {
namespace {

thread_local HostReadObserver t_observer;

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

HostCopy::HostCopy(const Tensor& src) {
  MT_CHECK(src.defined(), "HostCopy: the tensor to copy is undefined");
  if (src.device().is_cpu()) {
    host_ = empty(src.shape(), {.dtype = src.dtype()});
    copy_(host_, src);
    return;
  }
#ifdef MANTISSA_WITH_CUDA
  source_ = src.contiguous();
  host_ = empty_pinned(src.shape(), src.dtype());
  event_ = gpu::start_copy_to_host(host_, source_);
#else
  MT_THROW("HostCopy: a tensor on ", src.device().str(), " in a build without CUDA");
#endif
}

HostCopy::~HostCopy() {
  try {
    release();
  } catch (const Error&) {
    // The device failed (its error was or will be raised where the work is read); nothing to free here.
  }
}

HostCopy::HostCopy(HostCopy&& other) noexcept
    : host_(std::move(other.host_)), source_(std::move(other.source_)), event_(std::exchange(other.event_, nullptr)) {}

HostCopy& HostCopy::operator=(HostCopy&& other) noexcept {
  if (this != &other) {
    this->~HostCopy();
    host_ = std::move(other.host_);
    source_ = std::move(other.source_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

// An abandoned copy (the loop threw before reading it) waits for its event before the pinned block goes
// back to the allocator, so that no later copy lands in memory this one still writes.
void HostCopy::release() {
#ifdef MANTISSA_WITH_CUDA
  if (event_ != nullptr) {
    gpu::finish_copy_to_host(event_);
    event_ = nullptr;
  }
#endif
  source_ = Tensor();
}

bool HostCopy::ready() const {
  MT_CHECK(defined(), "HostCopy::ready: nothing was copied");
#ifdef MANTISSA_WITH_CUDA
  if (event_ != nullptr) return gpu::copy_to_host_done(event_);
#endif
  return true;
}

const Tensor& HostCopy::wait() {
  MT_CHECK(defined(), "HostCopy::wait: nothing was copied");
  notify_host_read(HostRead::kHostCopyWait);
  release();
  return host_;
}

}  // namespace mantissa
