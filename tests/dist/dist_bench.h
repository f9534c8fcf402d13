// `mantissa_dist_tests bench`: all-reduce timings for bench/RESULTS.md (tests/dist/dist_bench.cc).
// `mantissa_dist_tests overlap`: DDP's all-reduce against the backward it overlaps (tests/dist/overlap_bench.cc).
#pragma once

namespace mantissa {
int run_allreduce_bench();
int run_overlap_bench();
}  // namespace mantissa
