// Launcher of the CUDA cumsum kernel (ops/reduce/scan.cu): one thread per line, adding in order in the
// compute type (f32 for 16-bit, else T) and rounding each output, as cpu::cumsum_lines: the same bits.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/half.h"

namespace mantissa::gpu {

enum class ScanOrder : uint8_t { kForward, kReverse };

// out[o, k, i] = sum of x[o, j, i] for j <= k (kForward) or j >= k (kReverse); x, out contiguous
// [outer, size, inner].
template <typename T>
void launch_cumsum_lines(const T* x, int64_t outer, int64_t size, int64_t inner, ScanOrder order, T* out,
                         cudaStream_t stream);

}  // namespace mantissa::gpu
