// What the allocator functions answer in a build without CUDA (CMake compiles cuda/absent/ only then):
// nothing is pinned and no cache holds anything; what needs a GPU throws, saying this build has none. The
// CUDA build's are framework/cuda/host/allocator.cc.
#include "framework/cuda/allocator.h"

#include "framework/cuda/device.h"
#include "framework/error.h"

namespace mantissa {
namespace {

[[noreturn]] void no_gpu(std::string_view what, int device) {
  MT_THROW(what, ": no CUDA device cuda:", device, ": ", cuda_unavailable_reason(),
           ". HINT: configure with -DMANTISSA_CUDA=ON on a machine with nvcc, or keep the tensors on the CPU");
}

}  // namespace

gpu::CachingAllocatorStats cuda_memory_stats(int device) { no_gpu("cuda_memory_stats", device); }
void cuda_reset_peak_memory_stats(int device) { no_gpu("cuda_reset_peak_memory_stats", device); }
void cuda_empty_cache() {}

Tensor empty_pinned(const Shape&, DType) { no_gpu("empty_pinned", 0); }
bool is_pinned(const Tensor&) { return false; }
gpu::CachingAllocatorStats pinned_memory_stats() { no_gpu("pinned_memory_stats", 0); }

Allocator* gpu::cuda_allocator(int device) { no_gpu("CUDA allocator", device); }

}  // namespace mantissa
