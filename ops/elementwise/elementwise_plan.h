// Host planning for the CUDA elementwise launchers: reads tensors' shapes and strides, broadcasts them
// to the output's shape and coalesces dims into an ElementwiseLayout (ops/cuda/offset_calc.h).
#pragma once

#include <array>
#include <optional>

#include "framework/strided.h"
#include "framework/tensor.h"
#include "ops/cpu/loops.h"
#include "ops/cuda/offset_calc.h"

namespace mantissa::gpu {

// The layout of `in` read against a contiguous output of `shape`, or nullopt when more than kMaxDims
// dims remain after coalescing (the caller then makes the inputs contiguous).
template <int N>
std::optional<ElementwiseLayout<N>> plan_elementwise(const Shape& shape, const std::array<const Tensor*, N>& in) {
  ElementwiseLayout<N> l;
  l.numel = shape_numel(shape);
  for (int k = 0; k < N; ++k) l.flat = l.flat && in[k]->is_contiguous() && in[k]->shape() == shape;
  if (l.flat || l.numel == 0) {
    l.flat = true;
    return l;
  }
  const Shape out_strides = contiguous_strides(shape);
  std::array<Shape, N> bstrides;
  std::array<const Shape*, N + 1> st;
  st[0] = &out_strides;
  for (int k = 0; k < N; ++k) {
    bstrides[k] = cpu::broadcast_strides(*in[k], shape);
    st[k + 1] = &bstrides[k];
  }
  // Coalescing with the (contiguous) output as operand 0 keeps the output index linear.
  const StridedLayout<N + 1> c = coalesce<N + 1>(shape, st);
  const int nd = static_cast<int>(c.shape.size());
  if (nd > kMaxDims) return std::nullopt;
  l.ndim = nd;
  for (int d = 0; d < nd; ++d) {  // innermost first
    l.sizes[d] = c.shape[nd - 1 - d];
    for (int k = 0; k < N; ++k) l.strides[k][d] = c.strides[k + 1][nd - 1 - d];
  }
  return l;
}

}  // namespace mantissa::gpu

#include "ops/reduce/reduce_plan.h"

namespace mantissa::gpu {

// One part (kept or reduced dims) of a reduction, coalesced, innermost first; nullopt past kMaxDims.
inline std::optional<ElementwiseLayout<1>> plan_part(const Shape& shape, const Shape& strides) {
  ElementwiseLayout<1> l;
  l.flat = false;
  l.numel = shape_numel(shape);
  const StridedLayout<1> c = coalesce<1>(shape, std::array<const Shape*, 1>{&strides});
  const int nd = static_cast<int>(c.shape.size());
  if (nd > kMaxDims) return std::nullopt;
  l.ndim = nd;
  for (int d = 0; d < nd; ++d) {
    l.sizes[d] = c.shape[nd - 1 - d];
    l.strides[0][d] = c.strides[0][nd - 1 - d];
  }
  return l;
}

// A reduction of the input dims split into kept (outputs, row-major) and reduced ones.
inline std::optional<ReduceLayout> plan_reduce(const Shape& kept_shape, const Shape& kept_strides,
                                               const Shape& reduced_shape, const Shape& reduced_strides) {
  const auto kept = plan_part(kept_shape, kept_strides);
  const auto reduced = plan_part(reduced_shape, reduced_strides);
  if (!kept || !reduced) return std::nullopt;
  ReduceLayout r;
  r.kept = *kept;
  r.reduced = *reduced;
  r.n_out = kept->numel;
  r.n_red = reduced->numel;
  return r;
}

}  // namespace mantissa::gpu
