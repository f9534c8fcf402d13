// Sum over the leading rows of a contiguous [rows, cols] matrix (a reduction over the leading dims,
// e.g. a bias gradient over [B*T, C]): out[c] = scale * sum_r x[r, c], vectorized along the columns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "framework/convert.h"
#include "framework/dtype.h"
#include "framework/parallel.h"

namespace mantissa::cpu {

// A is the accumulator (double for f64, float otherwise). Row r goes to lane r % 8 and the 8 lanes are
// added as ((0+1)+(2+3))+((4+5)+(6+7)): exactly the order of the per-output strided walk in
// ops/reduce/reduce_cpu.h (sum_reduce), so both paths give the same bits; the columns are summed side by side in blocks
// of kCols, which keeps the lanes in registers/L1 and the loads contiguous. Threads split the column blocks, so the
// result does not depend on the thread count.
template <typename T, typename A>
void column_sum(const T* x, int64_t rows, int64_t cols, A scale, T* out) {
  constexpr int64_t kCols = 64;
  constexpr int kLanes = 8;
  const int64_t blocks = (cols + kCols - 1) / kCols;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, rows * kCols));
  parallel_for(blocks, grain, [&](int64_t begin, int64_t end) {
    alignas(64) A acc[kLanes][kCols];
    alignas(64) float wide[kCols];  // one row segment widened to f32 (16-bit inputs)
    for (int64_t b = begin; b < end; ++b) {
      const int64_t c0 = b * kCols;
      const int64_t w = std::min(kCols, cols - c0);
      std::fill(&acc[0][0], &acc[0][0] + kLanes * kCols, A(0));
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = x + r * cols + c0;
        A* __restrict a = acc[r & (kLanes - 1)];
        if constexpr (std::is_same_v<T, A>) {
          for (int64_t j = 0; j < w; ++j) a[j] += row[j];
        } else {
          convert(row, wide, w);
          for (int64_t j = 0; j < w; ++j) a[j] += wide[j];
        }
      }
      for (int64_t j = 0; j < w; ++j) {
        const A total =
            ((acc[0][j] + acc[1][j]) + (acc[2][j] + acc[3][j])) + ((acc[4][j] + acc[5][j]) + (acc[6][j] + acc[7][j]));
        out[c0 + j] = static_cast<T>(static_cast<A>(total * scale));
      }
    }
  });
}

}  // namespace mantissa::cpu
