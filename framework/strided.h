// Strided iteration over N operands that share one shape (already broadcast: a broadcast dim has
// stride 0). Dims are coalesced where every operand is contiguous across them, so a contiguous or
// simply-transposed case becomes one long inner loop. Kernels get (n, base pointers, inner strides).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "framework/tensor.h"

namespace mantissa {

template <size_t N>
struct StridedLayout {
  std::vector<int64_t> shape;                   // coalesced, innermost last
  std::array<std::vector<int64_t>, N> strides;  // per operand, in elements
};

template <size_t N>
StridedLayout<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  StridedLayout<N> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // size-1 dims never move the pointers
    if (!out.shape.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k) {
        mergeable = mergeable && out.strides[k].back() == (*strides[k])[d] * shape[d];
      }
      if (mergeable) {
        out.shape.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) out.strides[k].back() = (*strides[k])[d];
        continue;
      }
    }
    out.shape.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back((*strides[k])[d]);
  }
  if (out.shape.empty()) {  // a scalar or all-ones shape: one element
    out.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

// Calls f(n, offsets, inner_strides) once per innermost row; offsets are element offsets from each
// operand's base. Empty shapes make no calls.
template <size_t N, typename F>
void strided_for_each(const Shape& shape, const std::array<const Shape*, N>& strides, F&& f) {
  for (int64_t d : shape) {
    if (d == 0) return;
  }
  const StridedLayout<N> L = coalesce<N>(shape, strides);
  const size_t nd = L.shape.size();
  const int64_t inner = L.shape[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = L.strides[k][nd - 1];
  std::vector<int64_t> idx(nd, 0);
  std::array<int64_t, N> off{};
  while (true) {
    f(inner, off, inner_strides);
    // Advance the outer index (all dims but the last), odometer style.
    size_t d = nd - 1;
    while (d-- > 0) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += L.strides[k][d];
      if (idx[d] < L.shape[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= L.strides[k][d] * L.shape[d];
      idx[d] = 0;
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

}  // namespace mantissa
