// `mantissa_dist_tests all` runs these too: BatchNorm's buffers under data parallelism
// (tests/dist/batchnorm_dist.cc).
#pragma once

#include "framework/dist/process_group.h"

namespace mantissa {
// Returns the number of failed checks on this rank (each printed to stderr); `checks` counts them all.
int run_batchnorm_checks(ProcessGroup& pg, int& checks);
}  // namespace mantissa
