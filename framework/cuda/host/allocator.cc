// The CUDA caching allocator of each GPU and the pinned host allocator: CachingAllocatorCore (the
// bookkeeping) over backends that call cudaMalloc / cudaHostAlloc and CUDA events. CUDA builds only; a
// build without CUDA answers with framework/cuda/absent/allocator.cc.
#include "framework/cuda/allocator.h"

#include <array>
#include <cuda_runtime_api.h>
#include <memory>
#include <mutex>

#include "framework/cuda/check.h"
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"
#include "framework/error.h"

namespace mantissa {
namespace {

void check_cuda_device(int device, std::string_view what) {
  MT_CHECK(device >= 0 && device < cuda_device_count(), what, ": no CUDA device cuda:", device, " (",
           cuda_device_count(), " present", cuda_device_count() == 0 ? ": " + cuda_unavailable_reason() : std::string(),
           "). HINT: run on a machine with an NVIDIA GPU and driver, or keep the tensors on the CPU");
}

cudaStream_t as_stream(gpu::StreamId s) { return reinterpret_cast<cudaStream_t>(s); }
gpu::StreamId as_id(cudaStream_t s) { return reinterpret_cast<gpu::StreamId>(s); }

// Events for both backends: created on the device of the stream they are recorded on.
class EventCalls : public gpu::AllocatorBackend {
 public:
  gpu::EventId record_event(gpu::StreamId stream) override {
    int device = 0;
    MT_CUDA_CHECK(cudaStreamGetDevice(as_stream(stream), &device));
    gpu::DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(e, as_stream(stream)));
    return reinterpret_cast<gpu::EventId>(e);
  }
  bool event_done(gpu::EventId event) override {
    const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    MT_CUDA_CHECK(err);
    return true;
  }
  void wait_event(gpu::EventId event) override {
    MT_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
  }
  void destroy_event(gpu::EventId event) override {
    MT_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)));
  }
};

class DeviceMemory final : public EventCalls {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  void* malloc(size_t nbytes) override {
    gpu::DeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky; clear it so the retry and later calls do not see it
      return nullptr;
    }
    MT_CUDA_CHECK(err);
    return p;
  }
  void free(void* ptr) override {
    gpu::DeviceGuard guard(device_);
    MT_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int device_;
};

class PinnedMemory final : public EventCalls {
 public:
  void* malloc(size_t nbytes) override {
    void* p = nullptr;
    // Portable: pinned for every GPU of the process, not only the current one.
    const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    MT_CUDA_CHECK(err);
    return p;
  }
  void free(void* ptr) override { MT_CUDA_CHECK(cudaFreeHost(ptr)); }
};

// The Allocator interface over a core; device blocks belong to the allocating thread's current stream.
class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device)
      : device_(device),
        backend_(device),
        core_(&backend_, Device{DeviceType::kCUDA, static_cast<int8_t>(device)}.str()) {}
  void* allocate(size_t nbytes) override { return core_.allocate(nbytes, as_id(gpu::current_stream(device_))); }
  void deallocate(void* ptr, size_t) override { core_.deallocate(ptr); }
  gpu::CachingAllocatorCore& core() { return core_; }

 private:
  int device_;
  DeviceMemory backend_;
  gpu::CachingAllocatorCore core_;
};

// Pinned blocks are not tied to a stream: all share one pseudo stream; record_stream covers the copies.
constexpr gpu::StreamId kHostStream = ~gpu::StreamId{0};

class PinnedCachingAllocator final : public Allocator {
 public:
  PinnedCachingAllocator() : core_(&backend_, "pinned host memory") {}
  void* allocate(size_t nbytes) override { return core_.allocate(nbytes, kHostStream); }
  void deallocate(void* ptr, size_t) override { core_.deallocate(ptr); }
  gpu::CachingAllocatorCore& core() { return core_; }

 private:
  PinnedMemory backend_;
  gpu::CachingAllocatorCore core_;
};

constexpr int kMaxDevices = 64;

CudaCachingAllocator& device_allocator(int device) {
  check_cuda_device(device, "CUDA allocator");
  MT_CHECK(device < kMaxDevices, "CUDA allocator: device ", device, " is beyond the ", kMaxDevices, " supported");
  // Leaked on purpose: tensors in static objects may be freed after main returns.
  static std::array<CudaCachingAllocator*, kMaxDevices> allocators{};
  static std::array<std::once_flag, kMaxDevices> once;
  std::call_once(once[static_cast<size_t>(device)],
                 [device] { allocators[static_cast<size_t>(device)] = new CudaCachingAllocator(device); });
  return *allocators[static_cast<size_t>(device)];
}

PinnedCachingAllocator& pinned_allocator() {
  check_cuda_device(0, "pinned memory");
  static auto* a = new PinnedCachingAllocator();
  return *a;
}

}  // namespace

gpu::CachingAllocatorStats cuda_memory_stats(int device) { return device_allocator(device).core().stats(); }
void cuda_reset_peak_memory_stats(int device) { device_allocator(device).core().reset_peak_stats(); }
void cuda_empty_cache() {
  for (int d = 0; d < cuda_device_count() && d < kMaxDevices; ++d) device_allocator(d).core().empty_cache();
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * element_size(dtype);
  impl->storage = std::make_shared<Storage>(nbytes, kCPU, &pinned_allocator());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || cuda_device_count() == 0) return false;
  const void* base = t.storage() ? t.storage()->data() : nullptr;
  return base != nullptr && pinned_allocator().core().owns(base);
}

gpu::CachingAllocatorStats pinned_memory_stats() { return pinned_allocator().core().stats(); }

namespace gpu {

Allocator* cuda_allocator(int device) { return &device_allocator(device); }

void record_stream(const Tensor& t, cudaStream_t stream) {
  void* base = t.storage() ? t.storage()->data() : nullptr;
  if (base == nullptr) return;
  if (t.device().is_cuda()) {
    device_allocator(t.device().index).core().record_stream(base, as_id(stream));
  } else {
    MT_CHECK(is_pinned(t), "record_stream: the CPU tensor ", shape_str(t.shape()),
             " is not in pinned memory. HINT: only CUDA tensors and pin_memory() tensors have streams");
    pinned_allocator().core().record_stream(base, as_id(stream));
  }
}

}  // namespace gpu

}  // namespace mantissa
