// `mantissa_dist_tests all` runs these too: the sharded collectives and ZeRO-1 against plain DDP
// (tests/dist/zero_dist.cc).
#pragma once

#include "framework/dist/process_group.h"

namespace mantissa {
// Returns the number of failed checks on this rank (each printed to stderr); `checks` counts them all.
int run_zero_checks(ProcessGroup& pg, int& checks);
}  // namespace mantissa
