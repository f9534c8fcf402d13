// `mantissa_dist_tests all` runs these too: the Trainer on N ranks with an overflow on one rank only
// (tests/dist/trainer_dist.cc).
#pragma once

#include "framework/dist/process_group.h"

namespace mantissa {
// Returns the number of failed checks on this rank (each printed to stderr); `checks` counts them all.
int run_trainer_checks(ProcessGroup& pg, int& checks);
}  // namespace mantissa
