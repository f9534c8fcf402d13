// Row gather / row scatter-add (index_select, embedding) and element gather / scatter-add along a dim
// (gather). Forward copies split over threads; accumulations run serially so repeated indices add in a
// fixed order (the result is reproducible run to run).
#include "ops/shape/shape_cpu.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "framework/parallel.h"
#include "framework/strided.h"

namespace mantissa::cpu {

Tensor checked_index(const Tensor& index, int64_t limit, std::string_view op, std::string_view what) {
  MT_CHECK(index.defined(), op, ": the index tensor is undefined");
  MT_CHECK(index.dtype() == DType::kI64 || index.dtype() == DType::kI32, op, ": expected an index of dtype i64 ",
           "or i32, got ", dtype_name(index.dtype()), " ", shape_str(index.shape()),
           ". HINT: convert with .to(kInt64)");
  MT_CHECK(index.device().is_cpu(), op, ": no kernel for an index on ", index.device().str(), " in this build");
  Tensor out = index.to(DType::kI64).contiguous();
  const int64_t* p = out.data<int64_t>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    MT_CHECK(p[i] >= 0 && p[i] < limit, op, ": index ", p[i], " (at flat position ", i, " of index ",
             shape_str(index.shape()), ") is out of range for ", what, " ", limit, "; expected [0, ", limit - 1, "]");
  }
  return out;
}

template <typename T>
void index_select_rows(const T* x, const int64_t* index, int64_t n_index, IndexGeometry g, T* out) {
  const int64_t rows = g.outer * n_index;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.inner));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / n_index, i = r % n_index;
      const T* src = x + (o * g.size + index[i]) * g.inner;
      std::memcpy(out + r * g.inner, src, static_cast<size_t>(g.inner) * sizeof(T));
    }
  });
}

template <typename T, typename A>
void index_add_rows(const T* grad, const int64_t* index, int64_t n_index, IndexGeometry g, A* acc) {
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t i = 0; i < n_index; ++i) {
      const T* src = grad + (o * n_index + i) * g.inner;
      A* dst = acc + (o * g.size + index[i]) * g.inner;
      for (int64_t k = 0; k < g.inner; ++k) dst[k] += static_cast<A>(src[k]);
    }
  }
}

template <typename T>
void gather_strided(const T* x, const Shape& x_strides, int64_t dim, const int64_t* index, const Shape& shape, T* out) {
  const Shape contiguous = contiguous_strides(shape);
  Shape xs = x_strides;
  const int64_t dim_stride = xs[static_cast<size_t>(dim)];
  xs[static_cast<size_t>(dim)] = 0;  // the index supplies the coordinate along dim
  std::array<const Shape*, 2> st{&contiguous, &xs};
  strided_for_each<2>(shape, st, [&](int64_t n, const auto& off, const auto& s) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = off[0] + i * s[0];
      out[p] = x[off[1] + i * s[1] + index[p] * dim_stride];
    }
  });
}

template <typename T, typename A>
void scatter_add_strided(const T* grad, const int64_t* index, const Shape& shape, int64_t dim, const Shape& acc_shape,
                         A* acc) {
  const Shape contiguous = contiguous_strides(shape);
  Shape as = contiguous_strides(acc_shape);
  const int64_t dim_stride = as[static_cast<size_t>(dim)];
  as[static_cast<size_t>(dim)] = 0;
  std::array<const Shape*, 2> st{&contiguous, &as};
  strided_for_each<2>(shape, st, [&](int64_t n, const auto& off, const auto& s) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = off[0] + i * s[0];
      acc[off[1] + i * s[1] + index[p] * dim_stride] += static_cast<A>(grad[p]);
    }
  });
}

#define MT_INSTANTIATE_(T)                                                                                          \
  template void index_select_rows<T>(const T*, const int64_t*, int64_t, IndexGeometry, T*);                         \
  template void index_add_rows<T, compute_t<T>>(const T*, const int64_t*, int64_t, IndexGeometry, compute_t<T>*);   \
  template void gather_strided<T>(const T*, const Shape&, int64_t, const int64_t*, const Shape&, T*);               \
  template void scatter_add_strided<T, compute_t<T>>(const T*, const int64_t*, const Shape&, int64_t, const Shape&, \
                                                     compute_t<T>*)
MT_INSTANTIATE_(float);
MT_INSTANTIATE_(double);
MT_INSTANTIATE_(Half);
MT_INSTANTIATE_(BFloat16);
#undef MT_INSTANTIATE_
// Integer and bool tensors can be selected and gathered too (not differentiated).
#define MT_INSTANTIATE_FORWARD_(T)                                                          \
  template void index_select_rows<T>(const T*, const int64_t*, int64_t, IndexGeometry, T*); \
  template void gather_strided<T>(const T*, const Shape&, int64_t, const int64_t*, const Shape&, T*)
MT_INSTANTIATE_FORWARD_(int64_t);
MT_INSTANTIATE_FORWARD_(int32_t);
MT_INSTANTIATE_FORWARD_(bool);
MT_INSTANTIATE_FORWARD_(Float8E4M3);
MT_INSTANTIATE_FORWARD_(Float8E5M2);
MT_INSTANTIATE_FORWARD_(uint8_t);
#undef MT_INSTANTIATE_FORWARD_

}  // namespace mantissa::cpu
