// The precision ladder's rungs the optimizer benchmarks time (bench/optim_bench.cc on the CPU,
// bench/cuda_optim_bench.cc on a GPU), and what an Adam step must move per value under each.
#pragma once

#include <vector>

#include "optim/precision_ladder.h"

namespace mantissa {

struct LadderRung {
  const char* name;  // the benchmark's suffix
  PrecisionLadder ladder;
};

// Every rung but the default (fp32 masters and fp32 state: the fused loops, benchmarked on their own).
inline const std::vector<LadderRung>& ladder_rungs() {
  static const std::vector<LadderRung> kRungs = {
      {"StateBf16", {.optimizer_state = StateStorage::kBf16}},
      {"State8bit", {.optimizer_state = StateStorage::k8bit}},
      {"Bf16Nearest", {.master_weights = MasterWeights::kNone}},
      {"Bf16Stochastic", {.master_weights = MasterWeights::kNone, .update_rounding = UpdateRounding::kStochastic}},
      {"Bf16Kahan", {.master_weights = MasterWeights::kNone, .update_rounding = UpdateRounding::kKahan}},
      {"Bf16Stochastic8bit",
       {.master_weights = MasterWeights::kNone,
        .update_rounding = UpdateRounding::kStochastic,
        .optimizer_state = StateStorage::k8bit}},
      {"Bf16Kahan8bit",
       {.master_weights = MasterWeights::kNone,
        .update_rounding = UpdateRounding::kKahan,
        .optimizer_state = StateStorage::k8bit}},
  };
  return kRungs;
}

// Bytes an Adam step moves per value, each array read or written once (the STREAM convention), from what the rung
// stores (PrecisionLadder::bytes_per_parameter): weights, moments (absmax included) and compensation read and
// written, the grad read, the working copy written.
inline double adam_step_bytes(const PrecisionLadder& ladder, bool working_copy) {
  const BytesPerParameter b = ladder.bytes_per_parameter(/*moments=*/2, working_copy);
  return 2 * b.weights + b.working_copy + b.grads + 2 * b.state + 2 * b.compensation;
}

}  // namespace mantissa
