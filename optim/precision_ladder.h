// The precision ladder (issue 36): how many bytes an optimizer keeps per parameter. Three independent choices, one
// struct that every optimizer (SGD, Adam, AdamW, Lion) takes in its constructor:
//
//   master_weights   fp32: the optimizer updates fp32 masters (autocast makes the 16-bit copies): the 2018 recipe.
//                    none: the parameters themselves are bf16 (Module::to(kBF16)); each update is rounded into them.
//   update_rounding  (master_weights=none only) nearest: round to nearest even, the naive rung, which stalls once
//                    an update is below half a weight's ulp; stochastic: round up with probability equal to the
//                    distance (unbiased), from a counter-based Philox stream per parameter; kahan: round to nearest
//                    and carry what the rounding lost in a bf16 compensation buffer into the next step.
//   optimizer_state  fp32, bf16, or 8bit: the moments (momentum buffer, exp_avg, exp_avg_sq, max_exp_avg_sq)
//                    block-wise quantized to Dettmers et al.'s dynamic map, 2048 values per f32 absmax.
//
// The update itself is the optimizer's one element formula (optim/update_math.h) in f32, unchanged: the ladder only
// changes how parameters and state are loaded into f32 and stored back (optim/cpu/ladder_kernels.h), so every rung
// is the fp32 update up to the storage's rounding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mantissa {

enum class MasterWeights : uint8_t { kFp32, kNone };
enum class UpdateRounding : uint8_t { kNearest, kStochastic, kKahan };
enum class StateStorage : uint8_t { kFp32, kBf16, k8bit };

const char* master_weights_name(MasterWeights m);    // "fp32", "none"
const char* update_rounding_name(UpdateRounding r);  // "nearest", "stochastic", "kahan"
const char* state_storage_name(StateStorage s);      // "fp32", "bf16", "8bit"

// What one parameter costs under a ladder, in bytes, as mantissa holds it (the grads have the parameter's dtype;
// the working copy is autocast's persistent 16-bit copy of an fp32 master, when enabled).
struct BytesPerParameter {
  double weights = 0, working_copy = 0, grads = 0, state = 0, compensation = 0;
  double total() const { return weights + working_copy + grads + state + compensation; }
};

struct PrecisionLadder {
  MasterWeights master_weights = MasterWeights::kFp32;
  UpdateRounding update_rounding = UpdateRounding::kNearest;
  StateStorage optimizer_state = StateStorage::kFp32;
  // The key of stochastic rounding's Philox stream; a parameter's draws are a function of (seed, its name, its step
  // count, the element), so a resumed run rounds as the uninterrupted one did. Saved with the state.
  uint64_t seed = 0;

  bool operator==(const PrecisionLadder&) const = default;
  // fp32 masters and fp32 state: the optimizers' own loops, untouched.
  bool is_default() const { return master_weights == MasterWeights::kFp32 && optimizer_state == StateStorage::kFp32; }
  // "master_weights=none update_rounding=stochastic optimizer_state=8bit seed=1" (update_rounding and seed only where
  // they act): the form the optimizer state saves and the errors quote.
  std::string str() const;
  // The settings' own consistency (update_rounding other than nearest needs master_weights=none); throws
  // mantissa::Error naming both settings, prefixed with `who`.
  void validate(const char* who) const;
  // Bytes per parameter for an optimizer with `moments` state tensors per parameter (SGD with momentum and Lion 1,
  // Adam 2, Adam with amsgrad 3).
  BytesPerParameter bytes_per_parameter(int moments, bool working_copy) const;
};

// The inverse of str(); nullopt for anything else.
std::optional<PrecisionLadder> parse_precision_ladder(std::string_view s);

// A parameter's stochastic-rounding stream id: FNV-1a of its dotted name (names, unlike addresses, survive a restart).
uint32_t ladder_stream(std::string_view param_name);

}  // namespace mantissa
