// Host-planned geometry of the CUDA reductions, shared by host and device code (no CUDA headers): the
// input seen as outputs x reduced elements, each part an offset calculator over its own dims; how the
// work is split over warps, threads and grid slices; and the (value, index) rule of max/argmax.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/cuda/offset_calc.h"

namespace mantissa::gpu {

// Input offset of (output o, reduced element r) = kept.offset(o) + reduced.offset(r); each part is an
// ElementwiseLayout<1> with its own sizes/strides (innermost first; `flat` is unused).
struct ReduceLayout {
  int64_t n_out = 1;  // number of outputs
  int64_t n_red = 1;  // elements reduced into each output
  ElementwiseLayout<1> kept, reduced;
  // The reduced elements of one output are contiguous in their innermost dim (a row reduction).
  bool rows() const { return reduced.ndim > 0 && reduced.strides[0][0] == 1; }
};

enum class ReduceMode : uint8_t {
  kRows,     // one warp per (output, slice): lanes read consecutive reduced elements
  kColumns,  // one thread per (output, slice): neighbouring threads read neighbouring outputs
};

// splits > 1 cuts each output's reduced elements into `splits` slices of `chunk` elements, reduced by
// different warps/threads into an accumulator workspace [n_out, splits] that a second kernel adds up in
// slice order. The result depends only on this geometry, so a device gives the same bits every run.
struct ReduceGeometry {
  ReduceMode mode = ReduceMode::kRows;
  int64_t splits = 1;
  int64_t chunk = 1;
  unsigned blocks_x = 1, blocks_y = 1, threads = 256;
};

inline constexpr int64_t kRowChunkMin = 1024;   // reduced elements per warp slice, at least
inline constexpr int64_t kColumnChunkMin = 64;  // reduced elements per thread slice, at least
inline constexpr int64_t kMaxSplits = 4096;     // bounded workspace and a short final pass
inline constexpr int64_t kRowsMinLength = 16;   // shorter reduced rows go to the column mode

inline int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Enough warps (rows) or threads (columns) to keep `sm_count` SMs busy: about 32 warps per SM.
// Every input gives a launchable geometry: an empty reduction (n_red == 0, e.g. x [4, 0] summed over dim
// 1) is one slice of chunk 1 in which each output adds nothing, so the kernels write 0 * scale, the
// CPU's value (0 for sum, NaN for mean: scale is then 1/0); no outputs (n_out == 0) still give one block.
inline ReduceGeometry plan_reduce_geometry(int64_t n_out, int64_t n_red, bool rows, int sm_count) {
  ReduceGeometry g;
  // A warp per output would idle most lanes on very short rows (e.g. [N, 3] summed over the 3): a thread
  // per output walks them instead.
  if (n_red < kRowsMinLength) rows = false;
  const int64_t target_warps = int64_t{32} * (sm_count > 0 ? sm_count : 1);
  if (rows) {
    g.mode = ReduceMode::kRows;
    if (n_out < target_warps && n_red > 2 * kRowChunkMin) {
      g.splits = std::min<int64_t>({div_up(target_warps, n_out), div_up(n_red, kRowChunkMin), kMaxSplits});
    }
    g.chunk = std::max<int64_t>(div_up(n_red, g.splits), 1);
    g.splits = std::max<int64_t>(div_up(n_red, g.chunk), 1);  // no empty slice, but at least one
    const int64_t warps = n_out * g.splits;
    g.threads = 256;
    g.blocks_x = static_cast<unsigned>(std::clamp<int64_t>(div_up(warps, 8), 1, kMaxBlocks));
    g.blocks_y = 1;
  } else {
    g.mode = ReduceMode::kColumns;
    const int64_t target_threads = target_warps * 32;
    if (n_out < target_threads && n_red > 2 * kColumnChunkMin) {
      g.splits = std::min<int64_t>({div_up(target_threads, n_out), div_up(n_red, kColumnChunkMin), kMaxSplits});
    }
    g.chunk = std::max<int64_t>(div_up(n_red, g.splits), 1);  // n_red == 0 would divide by a zero chunk
    g.splits = std::max<int64_t>(div_up(n_red, g.chunk), 1);
    g.threads = 256;
    g.blocks_x = static_cast<unsigned>(std::clamp<int64_t>(div_up(n_out, 256), 1, kMaxBlocks));
    g.blocks_y = static_cast<unsigned>(g.splits);  // <= kMaxSplits, within gridDim.y's 65535
  }
  return g;
}

// max/argmax: (a, ia) wins over (b, ib) when it is a NaN and b is not, or when neither is NaN and a is
// greater, or when they tie (both NaN, or equal) and ia is the smaller index. This picks the first NaN,
// else the first maximum: the CPU's sequential scan, in any combining order.
template <typename C>
MT_HD inline bool max_wins(C a, int64_t ia, C b, int64_t ib) {
  const bool na = a != a, nb = b != b;
  if (na != nb) return na;
  if (!na && a != b) return a > b;
  return ia < ib;
}

}  // namespace mantissa::gpu
