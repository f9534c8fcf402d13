// FP8 scaling recipes as data: how each tensor role of an FP8 linear (input, weight, grad_output) chooses
// its per-tensor scale, in which FP8 format it is cast, and what a cast does with values beyond the format's
// range. The recipe is read by amp/fp8.h (Fp8Context); this file only describes, parses and prints it.
//
//   Fp8Recipe::delayed()   Transformer Engine's DelayedScaling: an amax history per role (16 steps, max over
//                          it, margin 0); the scale of step t comes from the amaxes of the steps before it.
//   Fp8Recipe::dynamic()   torchao's tensorwise dynamic scaling: the amax of the tensor being cast.
//
// Block-scaled recipes (issue 35) scale each operand of each GEMM along that GEMM's K, from the values being cast
// (no history), re-quantizing from the high-precision tensors in the backward where the K changes
// (amp/fp8_linear.h says which cast each GEMM takes and what it costs):
//   Fp8Recipe::rowwise()   torchao's "rowwise": a scale per row of each operand, E4M3 everywhere, scales rounded
//                          down to powers of two (pow2=1).
//   Fp8Recipe::blockwise() DeepSeek-V3's: 1x128 tiles for activations and gradients, 128x128 blocks for weights
//                          (the backward reuses the weight's blocks transposed), f32 scales, E4M3 everywhere.
//   Fp8Recipe::mxfp8()     OCP MXFP8: blocks of 32 along K with E8M0 (power-of-two) scales, E4M3.
//   Fp8Recipe::nvfp4()     NVIDIA's NVFP4 training recipe: E2M1 values in blocks of 16 with E4M3 scales under a
//                          per-tensor f32 scale, 16x16 blocks for weights, gradients rounded stochastically, a
//                          16x16 random Hadamard transform on the weight gradient's operands.
//   Fp8Recipe::mxfp4()     OCP MXFP4: E2M1 values in blocks of 32 with E8M0 scales; stochastic rounding and the
//                          Hadamard transform as nvfp4's.
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
// Block-scaled recipes take no role prefixes, history, algo or scaling:
//   "rowwise:format=e4m3,margin=0,pow2=1"  (and blockwise): format=hybrid|e4m3, margin 0 to 64, pow2=0|1, and
//                                           the two overflow keys
//   "mxfp8:format=e4m3"                     format=hybrid|e4m3; scale=floor|rceil (below)
//   "nvfp4:sr=1,hadamard=1,weight_2d=1"     sr (gradients rounded stochastically), hadamard, weight_2d: 0|1
//   "mxfp4:sr=1,hadamard=1"                 and scale=floor|rceil
// MX scales: floor (the default) is the OCP MX v1.0 rule, floor(log2(amax)) - emax; rceil rounds amax / max up to
// a power of two instead (cuBLAS's rule on Blackwell, Transformer Engine's MXFP8), so no block saturates. str()
// prints scale=rceil and leaves out the default, so that a line from before the key existed still reads the same.
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

// How finely a recipe scales: one scale per tensor (delayed and dynamic), or per row or block (the head words
// rowwise, blockwise, mxfp8, nvfp4, mxfp4).
enum class Fp8Granularity : uint8_t { kTensor, kRowwise, kBlockwise, kMxfp8, kNvfp4, kMxfp4 };
const char* fp8_granularity_name(Fp8Granularity g);  // "tensor", "rowwise", "blockwise", "mxfp8", "nvfp4", "mxfp4"

// The three roles of an FP8 linear, in the order their state is listed (stats(), state_dict()).
enum class Fp8Role : uint8_t { kInput, kWeight, kGradOutput };
inline constexpr Fp8Role kFp8Roles[] = {Fp8Role::kInput, Fp8Role::kWeight, Fp8Role::kGradOutput};
const char* fp8_role_name(Fp8Role role);  // "input", "weight", "grad_output"

struct Fp8Recipe {
  Fp8Granularity granularity = Fp8Granularity::kTensor;
  Fp8Format format = Fp8Format::kHybrid;
  Fp8TensorScaling input, weight, grad_output;
  Fp8Overflow forward_overflow = Fp8Overflow::kSaturate;
  Fp8Overflow backward_overflow = Fp8Overflow::kSaturate;
  // Block-scaled recipes only (each refused elsewhere):
  bool pow2_scales = false;          // rowwise, blockwise: scales rounded down to a power of two
  bool stochastic_rounding = false;  // nvfp4, mxfp4: grad_output's casts rounded stochastically
  bool hadamard = false;             // nvfp4, mxfp4: the weight gradient's two operands rotated along the batch
  bool weight_2d = false;            // nvfp4: 16x16 weight blocks (one quantization serves both weight GEMMs)
  bool rceil_scales = false;         // mxfp8, mxfp4: E8M0 scales rounded up (RCEIL), not down (the OCP rule)

  static Fp8Recipe delayed(int64_t history_len = 16, AmaxCompute amax_compute = AmaxCompute::kMax, int64_t margin = 0);
  static Fp8Recipe dynamic();
  static Fp8Recipe rowwise();
  static Fp8Recipe blockwise();
  static Fp8Recipe mxfp8();
  static Fp8Recipe nvfp4();
  static Fp8Recipe mxfp4();

  bool block_scaled() const { return granularity != Fp8Granularity::kTensor; }
  // E2M1 elements (nvfp4, mxfp4), stored as E4M3 bytes (ops/fp8/block_math.h).
  bool fp4() const { return granularity == Fp8Granularity::kNvfp4 || granularity == Fp8Granularity::kMxfp4; }
  // The width of a scale's block along a GEMM's K: 0 for per tensor and rowwise (one block), else 128, 32 or 16.
  int64_t block_k() const;

  const Fp8TensorScaling& role(Fp8Role r) const;
  Fp8TensorScaling& role(Fp8Role r);
  // The FP8 dtype role r is cast to: E4M3, except grad_output in kHybrid (E5M2); FP4 recipes' E2M1 values are
  // stored as E4M3.
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
