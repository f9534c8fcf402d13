// ranks_disagree (train/rank_agreement.h).
#include "train/rank_agreement.h"

#include <vector>

#include "framework/tensor.h"

namespace mantissa {

std::optional<RankDisagreement> ranks_disagree(ProcessGroup& group, int64_t value) {
  const Tensor all = group.all_gather(from_vector(std::vector<int64_t>{value})).contiguous();
  const int64_t* values = all.data<int64_t>();
  for (int q = 1; q < group.size(); ++q) {
    if (values[q] != values[0]) return RankDisagreement{.rank = q, .value = values[q], .rank0_value = values[0]};
  }
  return std::nullopt;
}

}  // namespace mantissa
