// conv2d kernels over raw pointers: im2col (unfold one sample's input into GEMM columns) and col2im
// (its adjoint, summing the columns back into an input-shaped buffer). The GEMMs run in ops/conv/conv.cc.
#pragma once

#include <array>
#include <cstdint>

#include "framework/half.h"

namespace mantissa::cpu {

// Geometry of one conv2d: input [N, C, H, W], weight [O, C/G, KH, KW], output [N, O, OH, OW].
struct Conv2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t oh = 0, ow = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1;
  int64_t groups = 1;
  int64_t c_per_group() const { return c / groups; }
  int64_t o_per_group() const { return o / groups; }
  int64_t col_rows() const { return c_per_group() * kh * kw; }  // K of the GEMM, per group
  int64_t out_plane() const { return oh * ow; }                 // P: output pixels per sample
  bool operator==(const Conv2dGeometry&) const = default;
  // Every field in declaration order: what the plan caches (oneDNN's, cuDNN's) key on.
  std::array<int64_t, 16> fields() const {
    return {n, c, h, w, o, kh, kw, oh, ow, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups};
  }
};

// col[(ci*KH + ki)*KW + kj][p] for `channels` channels of one sample x [channels, H, W] (contiguous);
// row stride of col is ld (>= OH*OW, so several samples can sit side by side). Padding reads 0.
// The element type may widen (Half -> float); the copy is exact.
template <typename T, typename U>
void im2col(const T* x, const Conv2dGeometry& g, int64_t channels, U* col, int64_t ld);

// Adjoint of im2col: x[ci, ih, iw] += col[...] for every column entry that read it. x is [channels, H, W].
template <typename A>
void col2im(const A* col, const Conv2dGeometry& g, int64_t channels, A* x);

}  // namespace mantissa::cpu
