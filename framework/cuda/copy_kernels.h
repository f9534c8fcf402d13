// Launchers of the CUDA copy kernels (framework/cuda/copy.cu): plain functions over raw device pointers
// (already at each tensor's offset), the strided geometry and a stream. A CUDA header: included only by
// files that CMake compiles with CUDA alone (copy.cu, cuda/host/transfer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/cuda/copy_math.h"
#include "framework/dtype.h"

namespace mantissa::gpu {

// dst[off0(i)] = cast_element(src[off1(i)]) for i in [0, n); any pair of f32 f64 f16 bf16 i64 i32 bool.
void launch_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype, const StridedOffsets<2>& geom, int64_t n,
                 cudaStream_t stream);
// dst[off0(i)] = the `element_size`-byte pattern in the low bytes of `bits`.
void launch_fill(void* dst, size_t element_size, uint64_t bits, const StridedOffsets<1>& geom, int64_t n,
                 cudaStream_t stream);
// dst[off0(i)] += src[off1(i)] in the compute type, rounded once; floating dtypes.
void launch_accumulate(void* dst, const void* src, DType dtype, const StridedOffsets<2>& geom, int64_t n,
                       cudaStream_t stream);

}  // namespace mantissa::gpu
