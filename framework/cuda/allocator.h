// The CUDA caching allocator (one per GPU, serving every CUDA tensor's storage) and the caching pinned
// host allocator (page-locked staging buffers for asynchronous copies; the DataLoader pins batches with
// pin_memory). Declared in every build: without CUDA or a GPU the functions throw saying why.
#pragma once

#include "framework/allocator.h"
#include "framework/cuda/caching_allocator.h"
#include "framework/tensor.h"

namespace mantissa {

// Statistics of GPU `device`'s caching allocator (allocated, reserved, peaks, cudaMalloc calls, hits).
gpu::CachingAllocatorStats cuda_memory_stats(int device = 0);
void cuda_reset_peak_memory_stats(int device = 0);
// Returns every wholly unused cached segment of every GPU to CUDA (cudaFree); tensors are untouched.
void cuda_empty_cache();

// An uninitialized CPU tensor in pinned (page-locked) memory, from the caching pinned allocator.
Tensor empty_pinned(const Shape& shape, DType dtype = DType::kF32);
// A contiguous pinned copy of the CPU tensor `t` (t itself when already pinned and contiguous). Copies
// from pinned memory to a GPU run asynchronously on the current stream.
Tensor pin_memory(const Tensor& t);
// Whether `t` is a CPU tensor whose storage is pinned memory from the pinned allocator.
bool is_pinned(const Tensor& t);
gpu::CachingAllocatorStats pinned_memory_stats();

namespace gpu {

// The caching allocator of GPU `device`; throws naming the device and why when it is absent.
Allocator* cuda_allocator(int device);

}  // namespace gpu
}  // namespace mantissa
