// Launchers of the CUDA reductions (ops/reduce/reduce.cu) over a host-planned ReduceLayout
// (ops/reduce/reduce_plan.h): sums (f32 accumulation for f32/f16/bf16, f64 for f64; mean is a sum with a
// scale) and max with its index along one dim.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "framework/half.h"
#include "ops/reduce/reduce_plan.h"

namespace mantissa::gpu {

// The split of a sum over `device`'s SMs; geometry.splits > 1 needs a workspace of
// n_out * splits accumulators (float, or double for f64).
ReduceGeometry sum_geometry(const ReduceLayout& layout, int device);

// out[o] = scale * sum_r x[kept(o) + reduced(r)], rounded once to T.
template <typename T>
void launch_sum(const ReduceLayout& layout, const ReduceGeometry& geometry, double scale, const T* x, void* workspace,
                T* out, cudaStream_t stream);

// values[o], indices[o] = the first NaN, else the first maximum over the reduced elements (one dim).
// T: float, double, Half, BFloat16, int64_t, int32_t.
template <typename T>
void launch_max(const ReduceLayout& layout, const T* x, T* values, int64_t* indices, cudaStream_t stream);

}  // namespace mantissa::gpu
