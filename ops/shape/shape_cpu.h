// Index kernels over raw pointers for index_select / embedding (rows of a [outer, size, inner] layout)
// and gather / scatter-add along one dim of a strided tensor. Indices are int64 and already checked
// to be in range by the typed entry.
#pragma once

#include <cstdint>
#include <string_view>

#include "framework/tensor.h"

namespace mantissa::cpu {

// A contiguous tensor seen as [outer, size, inner] around the indexed dim.
struct IndexGeometry {
  int64_t outer = 1;
  int64_t size = 1;   // the indexed dim of the source
  int64_t inner = 1;  // elements per row
};

// out[o, i, :] = x[o, index[i], :] for i < n_index; out is [outer, n_index, inner], contiguous.
template <typename T>
void index_select_rows(const T* x, const int64_t* index, int64_t n_index, IndexGeometry g, T* out);

// acc[o, index[i], :] += grad[o, i, :]; repeated indices add. A is the accumulation type (compute_t<T>).
template <typename T, typename A>
void index_add_rows(const T* grad, const int64_t* index, int64_t n_index, IndexGeometry g, A* acc);

// out[p] = x[p with coordinate `dim` replaced by index[p]] for every position p of `shape` (the index's
// shape). out and index are contiguous; x_strides are x's strides (x may be non-contiguous).
template <typename T>
void gather_strided(const T* x, const Shape& x_strides, int64_t dim, const int64_t* index, const Shape& shape, T* out);

// acc (contiguous, of shape acc_shape) at [p with coordinate `dim` = index[p]] += grad[p], grad and
// index contiguous of `shape`.
template <typename T, typename A>
void scatter_add_strided(const T* grad, const int64_t* index, const Shape& shape, int64_t dim, const Shape& acc_shape,
                         A* acc);

// `index` as a contiguous i64 tensor after checking its dtype (i64 or i32) and that every value lies in
// [0, limit); the error names `op`, the offending value, its flat position, and `what` the limit is.
Tensor checked_index(const Tensor& index, int64_t limit, std::string_view op, std::string_view what);

}  // namespace mantissa::cpu
