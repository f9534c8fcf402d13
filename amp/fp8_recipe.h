// FP8 scaling recipes as data: how each tensor role of an FP8 linear (input, weight, grad_output) chooses
// its per-tensor scale, in which FP8 format it is cast, and what a cast does with values beyond the format's
// range. The recipe is read by amp/fp8.h (Fp8Context); this file only describes, parses and prints it.
//
//   Fp8Recipe::delayed()   Transformer Engine's DelayedScaling: an amax history per role (16 steps, max over
//                          it, margin 0); the scale of step t comes from the amaxes of the steps before it.
//   Fp8Recipe::dynamic()   torchao's tensorwise dynamic scaling: the amax of the tensor being cast.
//
// Formats: kHybrid (TE's HYBRID) casts input and weight to E4M3 and grad_output to E5M2; kE4M3 casts all
// three to E4M3. Overflow: forward casts (input, weight) use forward_overflow, the backward's (grad_output)
// backward_overflow; both saturate by default (framework/float8.h defines the modes).
//
// As text (mantissa-train --fp8_recipe, logs): a head word, then comma-separated key=value options.
//   "delayed"                                       Fp8Recipe::delayed()
//   "delayed:history=16,algo=max,margin=0"          algo: max | most_recent
//   "dynamic" / "dynamic:margin=1"
//   format=hybrid|e4m3, forward_overflow=saturate|no_saturate, backward_overflow=saturate|no_saturate
// A key prefixed by a role ("grad_output.margin=1", "weight.scaling=dynamic") sets that role only; without
// a prefix it sets all three. str() prints a recipe in this form, and parse_fp8_recipe(r.str()) gives r back
// (history and algo are printed only for delayed roles: dynamic roles do not read them).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "framework/dtype.h"
#include "framework/float8.h"

namespace mantissa::amp {

enum class Fp8Scaling : uint8_t { kDynamic, kDelayed };
// Which amax of the history a delayed scale is computed from: the largest of the whole history, or the
// current step's.
enum class AmaxCompute : uint8_t { kMax, kMostRecent };

// How one tensor role is scaled. history_len and amax_compute apply to delayed scaling only; margin to both:
// scale = fp8_max / amax / 2^margin, so a margin leaves 2^margin of headroom for growth before the next
// update.
struct Fp8TensorScaling {
  Fp8Scaling scaling = Fp8Scaling::kDelayed;
  int64_t history_len = 16;
  AmaxCompute amax_compute = AmaxCompute::kMax;
  int64_t margin = 0;
  bool operator==(const Fp8TensorScaling&) const = default;
};

enum class Fp8Format : uint8_t { kHybrid, kE4M3 };

// The three roles of an FP8 linear, in the order their state is listed (stats(), state_dict()).
enum class Fp8Role : uint8_t { kInput, kWeight, kGradOutput };
inline constexpr Fp8Role kFp8Roles[] = {Fp8Role::kInput, Fp8Role::kWeight, Fp8Role::kGradOutput};
const char* fp8_role_name(Fp8Role role);  // "input", "weight", "grad_output"

struct Fp8Recipe {
  Fp8Format format = Fp8Format::kHybrid;
  Fp8TensorScaling input, weight, grad_output;
  Fp8Overflow forward_overflow = Fp8Overflow::kSaturate;
  Fp8Overflow backward_overflow = Fp8Overflow::kSaturate;

  static Fp8Recipe delayed(int64_t history_len = 16, AmaxCompute amax_compute = AmaxCompute::kMax, int64_t margin = 0);
  static Fp8Recipe dynamic();

  const Fp8TensorScaling& role(Fp8Role r) const;
  Fp8TensorScaling& role(Fp8Role r);
  // The FP8 dtype role r is cast to: E4M3, except grad_output in kHybrid (E5M2).
  DType dtype(Fp8Role r) const;
  Fp8Overflow overflow(Fp8Role r) const;  // forward_overflow for input and weight, backward_overflow else
  // One line for logs and README, in the form parse_fp8_recipe reads.
  std::string str() const;
  bool operator==(const Fp8Recipe&) const = default;
};

// Parses the text form above. An unknown head word, key or value, a value out of range (history 1 to
// 65536, margin 0 to 64) or a history/algo given to a dynamic role is an InvalidArgument naming it.
absl::StatusOr<Fp8Recipe> parse_fp8_recipe(std::string_view text);

// Checks what parse_fp8_recipe checks, for a recipe built in code; throws mantissa::Error naming the field.
void check_fp8_recipe(const Fp8Recipe& recipe);

// The largest finite value of an FP8 dtype: 448 (E4M3) or 57344 (E5M2).
float fp8_max(DType fp8);

}  // namespace mantissa::amp
