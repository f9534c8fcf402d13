// parallel_for: splits [0, n) into contiguous chunks over the OpenMP threads when the work is large
// enough to pay for the fork (grain = the smallest chunk worth a thread). Nested calls run serially.
#pragma once

#include <algorithm>
#include <cstdint>
#include <omp.h>

namespace mantissa {

inline int num_threads() { return omp_get_max_threads(); }

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), max_chunks));
  if (threads <= 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min(n, t * chunk);
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) f(begin, end);
  }
}

}  // namespace mantissa
