// Host-planned geometry for the CUDA elementwise kernels, shared by host and device code: the layout of
// N inputs read against a contiguous output (after broadcasting and dim coalescing, up to kMaxDims
// dims, innermost first), the offset calculator a thread uses to turn its output index into input
// offsets, and the launch geometry. Plain structs passed to kernels by value; no CUDA headers.
#pragma once

#include <cstdint>

#include "framework/cuda/copy_math.h"  // kMaxDims, shared with the copy kernels
#include "ops/pointwise_math.h"

namespace mantissa::gpu {

// N inputs against a contiguous output of `numel` elements. When `flat`, every input is contiguous with
// the output's shape (index i reads element i); otherwise sizes/strides (elements, innermost first)
// give each input's offset, a broadcast dim having stride 0.
template <int N>
struct ElementwiseLayout {
  int64_t numel = 0;
  bool flat = true;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

// The layout's strided part in index type I (uint32_t when every index and offset fits, else int64_t:
// 64-bit division is several times slower on the GPU).
template <int N, typename I>
struct OffsetCalc {
  int ndim = 0;
  I sizes[kMaxDims] = {};
  I strides[N][kMaxDims] = {};

  // off[k] = offset of input k for output element `linear`.
  MT_HD void offsets(I linear, I (&off)[N]) const {
    if (ndim == 1) {  // one dim (the common coalesced case): no division
      for (int k = 0; k < N; ++k) off[k] = linear * strides[k][0];
      return;
    }
    for (int k = 0; k < N; ++k) off[k] = 0;
      // Unrolled over kMaxDims with an early exit, so that every sizes[d] / strides[k][d] has a constant
      // index: the calculator then stays in the kernel's parameter space instead of being copied to
      // local memory (a stack frame per thread) to be indexed by a run-time d.
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      const I q = linear / sizes[d];
      const I idx = linear - q * sizes[d];
      linear = q;
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
  }
};

// True when every output index and every input offset of the layout fits below 2^31.
template <int N>
MT_HD inline bool fits_32bit(const ElementwiseLayout<N>& l) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (l.numel >= kLimit) return false;
  for (int k = 0; k < N; ++k) {
    int64_t max_off = 0;
    for (int d = 0; d < l.ndim; ++d) {
      const int64_t s = l.strides[k][d];
      if (s < 0) return false;
      max_off += (l.sizes[d] - 1) * s;
    }
    if (max_off >= kLimit) return false;
  }
  return true;
}

template <typename I, int N>
MT_HD inline OffsetCalc<N, I> make_offset_calc(const ElementwiseLayout<N>& l) {
  OffsetCalc<N, I> c;
  c.ndim = l.ndim;
  for (int d = 0; d < l.ndim; ++d) {
    c.sizes[d] = static_cast<I>(l.sizes[d]);
    for (int k = 0; k < N; ++k) c.strides[k][d] = static_cast<I>(l.strides[k][d]);
  }
  return c;
}

// Grid for `work` items of one thread each (grid-stride loops cover the rest).
struct LaunchGeometry {
  unsigned blocks = 1;
  unsigned threads = 256;
};
inline constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // enough to fill any GPU; loops stride past it
inline LaunchGeometry elementwise_geometry(int64_t work, int threads = 256) {
  LaunchGeometry g;
  g.threads = static_cast<unsigned>(threads);
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  g.blocks = static_cast<unsigned>(blocks);
  return g;
}

// Elements per 16-byte vector of T (the contiguous fast path loads and stores whole vectors).
template <typename T>
constexpr int vector_width() {
  return sizeof(T) >= 16 ? 1 : static_cast<int>(16 / sizeof(T));
}
// True when p is aligned for a vector of `width` elements of `elem_size` bytes.
inline bool is_vector_aligned(const void* p, int width, int elem_size) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(width * elem_size) == 0;
}
// The width the contiguous path moves: `width` when the output and each of the n_in inputs are aligned for
// it, else 1 (the scalar loop). The pointers are the tensors' own, storage offset applied (a view that
// starts mid-vector is misaligned), and on that path every tensor is contiguous of the output's shape, so
// element i sits at pointer + i for all of them and the pointers alone decide. The output's vector holds
// as many elements as the inputs' (a bool output of a compare: `width` bytes).
inline int flat_vector_width(int width, const void* out, int out_elem_size, const void* const* in, int n_in,
                             int in_elem_size) {
  if (width <= 1 || !is_vector_aligned(out, width, out_elem_size)) return 1;
  for (int k = 0; k < n_in; ++k) {
    if (!is_vector_aligned(in[k], width, in_elem_size)) return 1;
  }
  return width;
}

}  // namespace mantissa::gpu
