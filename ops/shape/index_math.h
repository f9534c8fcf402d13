// Host-planned geometry of the CUDA index kernels (gather / scatter-add along one dim of a strided
// tensor), with the per-element offset math as __host__ __device__ code that the CPU tests run.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/cuda/copy_math.h"  // MT_HD, kMaxDims

namespace mantissa::gpu {

// Positions p of the index's shape `sizes` (row-major, outermost first) map to the element of the
// indexed tensor at p with coordinate `dim` replaced by index[p]; `strides` are that tensor's strides.
struct GatherGeometry {
  int ndim = 0;
  int dim = 0;
  int64_t numel = 0;     // elements of the index
  int64_t dim_size = 1;  // the indexed tensor's size along dim: valid indices are [0, dim_size)
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

// The offset of position `linear` of the index (holding `index`) in the indexed tensor.
MT_HD inline int64_t gather_offset(const GatherGeometry& g, int64_t linear, int64_t index) {
  int64_t off = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t q = linear / g.sizes[d];
    const int64_t c = linear - q * g.sizes[d];
    linear = q;
    off += (d == g.dim ? index : c) * g.strides[d];
  }
  return off;
}

MT_HD inline bool index_in_range(int64_t index, int64_t size) { return index >= 0 && index < size; }

// The geometry for an index of shape `index_shape` into a tensor with `strides` and size `dim_size`
// along `dim`; ok = false when the tensor has more than kMaxDims dims.
struct GatherPlan {
  bool ok = false;
  GatherGeometry geometry;
};
inline GatherPlan plan_gather(const std::vector<int64_t>& index_shape, const std::vector<int64_t>& strides, int64_t dim,
                              int64_t dim_size) {
  GatherPlan plan;
  const int ndim = static_cast<int>(index_shape.size());
  if (ndim > kMaxDims || strides.size() != index_shape.size()) return plan;
  GatherGeometry& g = plan.geometry;
  g.ndim = ndim;
  g.dim = static_cast<int>(dim);
  g.dim_size = dim_size;
  g.numel = 1;
  for (int d = 0; d < ndim; ++d) {
    g.sizes[d] = index_shape[static_cast<size_t>(d)];
    g.strides[d] = strides[static_cast<size_t>(d)];
    g.numel *= g.sizes[d];
  }
  plan.ok = true;
  return plan;
}

}  // namespace mantissa::gpu
