// `mantissa_dist_tests all` runs these too: the loss scaler's found_inf agreed by N ranks
// (tests/dist/scaler_dist.cc).
#pragma once

#include "framework/dist/process_group.h"

namespace mantissa {
// Returns the number of failed checks on this rank (each printed to stderr); `checks` counts them all.
int run_scaler_checks(ProcessGroup& pg, int& checks);
}  // namespace mantissa
