// Where the ranks of a data-parallel run must hold the same value (batches per epoch, the step a resume
// starts at, whether rank 0 wrote its checkpoint), one collective finds the first rank that does not, so
// that a mismatch becomes a clear error on every rank instead of a hang or silently diverged replicas.
#pragma once

#include <cstdint>
#include <optional>

#include "framework/dist/process_group.h"

namespace mantissa {

// The first rank whose value differs from rank 0's.
struct RankDisagreement {
  int rank = 0;
  int64_t value = 0;        // that rank's
  int64_t rank0_value = 0;  // rank 0's
};

// Gathers every rank's `value` (one all_gather: every rank of `group` calls it at the same point, in the
// order of its other collectives) and returns the first rank that differs from rank 0, or nullopt when
// they all agree. Every rank gets the same answer.
std::optional<RankDisagreement> ranks_disagree(ProcessGroup& group, int64_t value);

}  // namespace mantissa
