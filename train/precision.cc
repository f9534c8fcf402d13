// The precision names' lookups, precision_dtype and PrecisionScope (train/precision.h).
#include "train/precision.h"

#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"

namespace mantissa {

const char* precision_name(Precision precision) {
  for (const PrecisionName& p : kPrecisionNames) {
    if (p.value == precision) return p.name;
  }
  return "?";
}

absl::StatusOr<Precision> parse_precision(std::string_view name) {
  for (const PrecisionName& p : kPrecisionNames) {
    if (name == p.name) return p.value;
  }
  // "fp32, fp16, bf16 or fp8"
  std::string valid;
  const size_t n = std::size(kPrecisionNames);
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppend(&valid, i == 0 ? "" : i + 1 < n ? ", " : " or ", kPrecisionNames[i].name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown precision '", std::string(name), "' (expected ", valid, ")"));
}

DType precision_dtype(Precision precision) {
  switch (precision) {
    case Precision::kF16: return DType::kF16;
    case Precision::kBF16:
    case Precision::kFp8: return DType::kBF16;  // fp8: what the layers outside the FP8 linears run in
    case Precision::kF32: break;
  }
  return DType::kF32;
}

PrecisionScope::PrecisionScope(Precision precision, Device device, amp::Fp8Context* fp8) {
  if (precision != Precision::kF32) {
    autocast_.emplace(amp::AutocastOptions{.device = device.type, .dtype = precision_dtype(precision)});
  }
  if (fp8 != nullptr) fp8_.emplace(*fp8);
}

}  // namespace mantissa
