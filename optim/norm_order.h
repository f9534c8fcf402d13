// The fixed order in which clip_grad_norm_ adds the squares of all the grads, and its clipping rule, shared
// by the CPU kernels (optim/cpu/optim_kernels.cc) and the CUDA kernels (optim/cuda/clip_kernels.cu), so both
// devices return the same bits whatever the thread count or the launch geometry. Two levels:
//   1. Each grad is cut into blocks of kBlock elements (a block never spans two grads; the last one may be
//      short). Element i of a block goes to lane i % kBlockLanes; each lane starts at 0.0 and adds x * x
//      (x widened to f64, the product rounded, then the sum) in increasing i; fold() then combines the
//      lanes into the block's partial.
//   2. The partials of all the grads, in order (grad 0's blocks, then grad 1's, ...), go to lane
//      p % kTotalLanes the same way, and fold() combines those lanes into the sum of squares.
// Lanes a short block or a short list leaves empty hold 0.0, and adding 0.0 to a sum of squares changes
// no bit, so an implementation may skip them. The lane counts fit both devices: the GPU runs one thread per
// four neighbouring lanes of level 1 (512 threads, one 16-byte load of f32 each) and one thread per lane of
// level 2; the CPU's lanes are an array its loops vectorize over. The max |x| of the inf norm is exact in
// any order; only a nan must win, which max_nan ensures at every step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "framework/host_device.h"
#include "framework/rounding.h"

namespace mantissa::norm_order {

inline constexpr int64_t kBlock = int64_t{1} << 14;
inline constexpr int kBlockLanes = 2048;
inline constexpr int kTotalLanes = 1024;
static_assert(kBlock % kBlockLanes == 0, "every lane of a full block gets the same number of elements");
static_assert((kBlockLanes & (kBlockLanes - 1)) == 0 && (kTotalLanes & (kTotalLanes - 1)) == 0,
              "fold() halves the lane count down to one");

// The number of partials (blocks) of a grad of n elements.
constexpr int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// offsets[i] is the index of grad i's first partial in the list of all partials; offsets[sizes.size()] is
// the length of that list.
inline std::vector<int64_t> partial_offsets(std::span<const int64_t> sizes) {
  std::vector<int64_t> offsets(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) offsets[i + 1] = offsets[i] + blocks(sizes[i]);
  return offsets;
}

// One lane step of the sum of squares: acc + x * x, the product rounded on its own.
MT_HD inline double add_square(double acc, double x) { return rn::add(acc, rn::mul(x, x)); }

// max(a, b) where a nan in either wins.
MT_HD inline double max_nan(double a, double b) { return b != b || b > a ? b : a; }

// Combines `lanes` values (a power of two) in place: s[j] = op(s[j], s[j + h]) for h = lanes / 2, ..., 1,
// and returns s[0]. The GPU runs the same pairs, one level per step, across its threads.
template <typename Op>
double fold(double* s, int lanes, Op op) {
  for (int h = lanes / 2; h >= 1; h /= 2) {
    for (int j = 0; j < h; ++j) s[j] = op(s[j], s[j + h]);
  }
  return s[0];
}

// The coefficient the grads are multiplied by: max_norm / (total + 1e-6) computed in f64, or 1 when the
// total is not finite (the grads are then left for the GradScaler to find the inf). The grads are scaled
// only when it is below 1, by the coefficient rounded once to their dtype. A nan max_norm gives a nan
// coefficient, which is not below 1 either.
MT_HD inline double clip_coefficient(double total, double max_norm) {
  if (total - total != 0.0) return 1.0;  // inf - inf and nan - nan are nan: total is not finite
  return rn::div(max_norm, rn::add(total, 1e-6));
}

}  // namespace mantissa::norm_order
