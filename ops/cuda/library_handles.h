// Per-thread, per-device handles of the CUDA libraries (cuBLASLt, cuBLAS, cuDNN) and the per-stream
// workspace their calls share. Only for CUDA-only files (.cu, host/*.cc).
#pragma once

#include <cstddef>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "ops/cuda/workspace_cache.h"

namespace mantissa::gpu {

// This thread's handle for GPU `device`, created on first use. Handles are never destroyed: when a
// thread ends its handles go back to a process-wide pool for the next thread (creating a cuDNN handle
// costs tens of milliseconds, and destroying handles during process teardown races the CUDA runtime's).
// The caller sets the stream (cublasSetStream / cudnnSetStream) before each use.
cublasLtHandle_t cublaslt_handle(int device);
cublasHandle_t cublas_handle(int device);
cudnnHandle_t cudnn_handle(int device);

// Scratch memory for library calls queued on `stream` of `device`: at least `bytes`. Work on one stream
// runs in order, so every call on it may reuse the one buffer. It comes from the caching allocator, is
// kept, and grows (rarely) without a sync. Hold the Workspace until the call that uses it is enqueued:
// another thread may grow the buffer meanwhile, and the old block must not be handed out for other work
// before this call is queued (ops/cuda/workspace_cache.h).
Workspace stream_workspace(int device, cudaStream_t stream, size_t bytes);

// cuBLASLt's workspace: 32 MiB lets it pick split-K and stream-K kernels on H100 (NVIDIA's guidance
// for Hopper is 32 MiB).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

}  // namespace mantissa::gpu
