// `mantissa_dist_tests bench`: all-reduce timings for bench/RESULTS.md (tests/dist/dist_bench.cc).
#pragma once

namespace mantissa {
int run_allreduce_bench();
}  // namespace mantissa
