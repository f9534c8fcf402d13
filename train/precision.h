// Precision: the number formats a run trains in, their names (the --precision flag, a checkpoint's
// /meta/precision) in one table, the dtype each runs its lower-precision ops in, and PrecisionScope, the
// autocast region of a run's forward.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "amp/autocast.h"
#include "amp/fp8.h"
#include "framework/device.h"
#include "framework/dtype.h"

namespace mantissa {

// fp16: autocast to f16 plus a GradScaler; bf16: autocast to bf16 (no scaler unless one is configured);
// fp8: the linears amp::Fp8Context manages run as FP8 GEMMs (TrainerConfig::fp8_recipe, HYBRID by default:
// E4M3 forward, E5M2 gradients) inside bf16 autocast, bf16 working copies, no scaler unless configured.
enum class Precision { kF32, kF16, kBF16, kFp8 };

// The name of each precision, in the order messages list them.
struct PrecisionName {
  const char* name;
  Precision value;
};
inline constexpr PrecisionName kPrecisionNames[] = {
    {"fp32", Precision::kF32}, {"fp16", Precision::kF16}, {"bf16", Precision::kBF16}, {"fp8", Precision::kFp8}};

const char* precision_name(Precision precision);  // "fp32", "fp16", "bf16", "fp8"
// The precision called `name`; an unknown name is an InvalidArgument error that lists the valid ones.
absl::StatusOr<Precision> parse_precision(std::string_view name);

// The dtype autocast and the optimizer's working copies use: f16, bf16 (fp8 too: its layers outside the FP8
// linears run in bf16), f32 for fp32.
DType precision_dtype(Precision precision);

// While it lives: autocast to precision_dtype(precision) on `device` (nothing for fp32) and, with an FP8
// context, the routing of its linears through FP8 GEMMs.
class PrecisionScope {
 public:
  PrecisionScope(Precision precision, Device device, amp::Fp8Context* fp8);

 private:
  std::optional<amp::AutocastGuard> autocast_;
  std::optional<amp::Fp8Guard> fp8_;
};

}  // namespace mantissa
