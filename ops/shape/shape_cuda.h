// The CUDA kernels of the index ops (ops/shape/shape.cc, ops/shape/index_put.cc): ops/shape/shape.cu's gathers and
// scatter-adds (atomic adds). Device indices are not range-checked: an out-of-range one gives NaN / 0 / a
// dropped add. Declared in every build; defined in shape.cu, which only CUDA builds
// compile.
#pragma once

#include <cstdint>
#include <string_view>

#include "framework/tensor.h"
#include "ops/shape/shape_cpu.h"

namespace mantissa {

// out = the rows of contiguous x at idx along the geometry's middle dim.
void cuda_index_select(const Tensor& x, const Tensor& idx, const cpu::IndexGeometry& geo, const Tensor& out);
// acc (compute dtype: f32 for 16-bit) += src's rows at idx along the geometry's middle dim.
void cuda_index_add(const Tensor& src, const Tensor& idx, const cpu::IndexGeometry& geo, const Tensor& acc);
// out = x (any strides) gathered at idx along dim.
void cuda_gather(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& out);
// acc (contiguous, compute dtype) += src scattered at idx along dim; op names the caller in errors.
void cuda_scatter_add(const Tensor& src, const Tensor& idx, int64_t dim, const Tensor& acc, std::string_view op);
// out (zeroed i64 [n, classes]) gets a 1 at each index.
void cuda_one_hot(const Tensor& idx, int64_t classes, const Tensor& out);
// rows[idx[i], :] = values[i, :] (values contiguous [n, inner], rows contiguous).
void cuda_index_copy(const Tensor& values, const Tensor& idx, const Tensor& rows, int64_t inner);

}  // namespace mantissa
