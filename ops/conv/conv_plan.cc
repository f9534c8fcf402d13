// Host-side convolution planning (ops/conv/conv_plan.h): built in every configuration, tested on the CPU.
#include "ops/conv/conv_plan.h"

#include <algorithm>
#include <array>

#include "ops/cuda/plan_hash.h"

namespace mantissa::gpu {

bool operator==(const ConvKey& x, const ConvKey& y) {
  return x.device == y.device && x.dtype == y.dtype && x.math == y.math && x.direction == y.direction &&
         x.geometry == y.geometry;
}

size_t ConvKeyHash::operator()(const ConvKey& key) const {
  std::array<int64_t, 20> fields{key.device, static_cast<int64_t>(key.dtype), static_cast<int64_t>(key.math),
                                 static_cast<int64_t>(key.direction)};
  std::ranges::copy(key.geometry.fields(), fields.begin() + 4);
  return static_cast<size_t>(hash_fields(fields));
}

bool conv_math_allowed(DType dtype, ConvMath math, ConvMathType candidate) {
  if (dtype != DType::kF32) return true;
  if (candidate == ConvMathType::kTensorOpAllowConversion) return false;  // f32 -> f16 operands
  return math == ConvMath::kTf32 || candidate == ConvMathType::kFma;
}

int pick_conv_candidate(std::span<const ConvCandidate> candidates, DType dtype, ConvMath math, size_t workspace_limit) {
  for (size_t i = 0; i < candidates.size(); ++i) {
    const ConvCandidate& c = candidates[i];
    if (c.ok && c.workspace <= workspace_limit && conv_math_allowed(dtype, math, c.math)) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace mantissa::gpu
