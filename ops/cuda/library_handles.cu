// Library handles per thread and device, and per-stream workspaces (ops/cuda/library_handles.h).
#include <array>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "framework/tensor.h"
#include "ops/cuda/library_check.h"
#include "ops/cuda/library_handles.h"

namespace mantissa::gpu {
namespace {

constexpr int kMaxDevices = 64;  // as framework/cuda/stream.cu

// One handle type's pool. Create runs with the device current.
template <typename Handle, Handle (*Create)()>
Handle thread_handle(int device) {
  MT_ASSERT(device >= 0 && device < kMaxDevices, "device ", device);
  struct Pool {
    std::mutex mu;
    std::array<std::vector<Handle>, kMaxDevices> free;
  };
  static Pool* const pool = new Pool;  // leaked on purpose: handles outlive static destruction
  struct Slots {
    std::array<Handle, kMaxDevices> handles{};
    ~Slots() {
      std::lock_guard<std::mutex> lock(pool->mu);
      for (int d = 0; d < kMaxDevices; ++d) {
        if (handles[d] != nullptr) pool->free[d].push_back(handles[d]);
      }
    }
  };
  thread_local Slots slots;
  Handle& h = slots.handles[device];
  if (h == nullptr) {
    {
      std::lock_guard<std::mutex> lock(pool->mu);
      if (!pool->free[device].empty()) {
        h = pool->free[device].back();
        pool->free[device].pop_back();
      }
    }
    if (h == nullptr) {
      DeviceGuard guard(device);
      h = Create();
    }
  }
  return h;
}

cublasLtHandle_t create_cublaslt() {
  cublasLtHandle_t h = nullptr;
  MT_CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

cublasHandle_t create_cublas() {
  cublasHandle_t h = nullptr;
  MT_CUBLAS_CHECK(cublasCreate(&h));
  return h;
}

cudnnHandle_t create_cudnn() {
  cudnnHandle_t h = nullptr;
  MT_CUDNN_CHECK(cudnnCreate(&h));
  return h;
}

}  // namespace

cublasLtHandle_t cublaslt_handle(int device) { return thread_handle<cublasLtHandle_t, create_cublaslt>(device); }
cublasHandle_t cublas_handle(int device) { return thread_handle<cublasHandle_t, create_cublas>(device); }
cudnnHandle_t cudnn_handle(int device) { return thread_handle<cudnnHandle_t, create_cudnn>(device); }

Workspace stream_workspace(int device, cudaStream_t stream, size_t bytes) {
  // Leaked as the handles: library calls may run during static destruction.
  static auto* const cache = new WorkspaceCache(
      [](int d, StreamId s, size_t n) {
        // Allocated with `stream` current, so the block belongs to it: released, it is reused only by later
        // work on this stream, which runs after every call that used it (no sync).
        StreamGuard guard(d, reinterpret_cast<cudaStream_t>(s));
        Tensor block = empty({static_cast<int64_t>(n / sizeof(float))}, {.dtype = DType::kF32, .device = cuda(d)});
        void* data = block.data_ptr();
        return std::shared_ptr<void>(data, [block](void*) mutable { block = Tensor(); });
      },
      kGemmWorkspaceBytes, size_t{1} << 20);
  return cache->get(device, reinterpret_cast<StreamId>(stream), bytes);
}

}  // namespace mantissa::gpu
