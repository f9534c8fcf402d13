// Host-side convolution planning (ops/cuda/conv_plan.h): built in every configuration, tested on the CPU.
#include "ops/cuda/conv_plan.h"

#include "ops/cuda/plan_hash.h"

namespace mantissa::gpu {

bool operator==(const ConvKey& x, const ConvKey& y) {
  const cpu::Conv2dGeometry &a = x.geometry, &b = y.geometry;
  return x.device == y.device && x.dtype == y.dtype && x.math == y.math && x.direction == y.direction && a.n == b.n &&
         a.c == b.c && a.h == b.h && a.w == b.w && a.o == b.o && a.kh == b.kh && a.kw == b.kw && a.oh == b.oh &&
         a.ow == b.ow && a.stride_h == b.stride_h && a.stride_w == b.stride_w && a.pad_h == b.pad_h &&
         a.pad_w == b.pad_w && a.dil_h == b.dil_h && a.dil_w == b.dil_w && a.groups == b.groups;
}

size_t ConvKeyHash::operator()(const ConvKey& key) const {
  const cpu::Conv2dGeometry& g = key.geometry;
  return static_cast<size_t>(hash_fields({key.device,
                                          static_cast<int64_t>(key.dtype),
                                          static_cast<int64_t>(key.math),
                                          static_cast<int64_t>(key.direction),
                                          g.n,
                                          g.c,
                                          g.h,
                                          g.w,
                                          g.o,
                                          g.kh,
                                          g.kw,
                                          g.oh,
                                          g.ow,
                                          g.stride_h,
                                          g.stride_w,
                                          g.pad_h,
                                          g.pad_w,
                                          g.dil_h,
                                          g.dil_w,
                                          g.groups}));
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
