// All-reduce timings over the MPI process group: 1, 4 and 25 MB buffers (25 MB is DDP's bucket size) in
// f32, and f16 (reduced in an f32 staging buffer twice its size). Median of the repetitions; bus bandwidth as NCCL
// defines it for all-reduce, bytes * 2 (n - 1) / n / time. Rank 0 prints a markdown table.
#include "tests/dist/dist_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "framework/dist/process_group.h"

namespace mantissa {

int run_allreduce_bench() {
  auto pg = init_process_group();
  const int n = pg->size();
  if (pg->rank() == 0) {
    std::printf("| dtype | buffer | ranks | median ms | algbw GB/s | busbw GB/s |\n|---|---|---|---|---|---|\n");
  }
  for (DType dtype : {DType::kF32, DType::kF16}) {
    // f32 50 MB is the f32 staging buffer of f16 25 MB: the reduction a 16-bit all-reduce really does.
    for (int64_t mb : {1, 4, 25, 50}) {
      if (dtype == DType::kF16 && mb == 50) continue;
      const int64_t bytes = mb << 20;
      Tensor t = full({bytes / static_cast<int64_t>(element_size(dtype))}, 1.0, {.dtype = dtype});
      const int reps = mb >= 25 ? 15 : 40;
      std::vector<double> ms;
      for (int rep = 0; rep < reps + 3; ++rep) {  // 3 warm-up runs
        fill_(t, 1.0);
        pg->barrier();
        const auto start = std::chrono::steady_clock::now();
        pg->all_reduce(t, ReduceOp::kSum);
        const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
        if (rep >= 3) ms.push_back(took.count());
      }
      // Every rank's median, then the slowest one: an all-reduce is done when the last rank has it.
      std::sort(ms.begin(), ms.end());
      Tensor median = full({1}, ms[ms.size() / 2], {.dtype = DType::kF64});
      pg->all_reduce(median, ReduceOp::kMax);
      const double m = median.item();
      if (pg->rank() == 0) {
        const double algbw = static_cast<double>(bytes) / (m * 1e-3) / 1e9;
        std::printf("| %s | %lld MB | %d | %.3f | %.2f | %.2f |\n", dtype_name(dtype).data(),
                    static_cast<long long>(mb), n, m, algbw, algbw * 2.0 * (n - 1) / n);
      }
    }
  }
  return 0;
}

}  // namespace mantissa
