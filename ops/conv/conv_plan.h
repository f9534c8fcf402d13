// Host-side planning of a cuDNN convolution, with no CUDA headers so that the CPU tests run it: the key
// under which descriptors and the chosen algorithm are cached, and the choice itself among cuDNN's
// ranked candidates (workspace limit, TF32 switch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "framework/dtype.h"
#include "ops/conv/conv_cpu.h"

namespace mantissa::gpu {

enum class ConvDirection : uint8_t { kForward, kBackwardData, kBackwardFilter };
enum class ConvMath : uint8_t { kExact, kTf32 };  // kTf32: f32 only

// Everything a cuDNN convolution plan depends on: device, dtype, math, direction and the whole
// geometry (input, weight, output sizes, stride, padding, dilation, groups).
struct ConvKey {
  int device = 0;
  DType dtype = DType::kF32;
  ConvMath math = ConvMath::kExact;
  ConvDirection direction = ConvDirection::kForward;
  cpu::Conv2dGeometry geometry;
  friend bool operator==(const ConvKey& x, const ConvKey& y);
};

struct ConvKeyHash {
  size_t operator()(const ConvKey& key) const;
};

// cudnnMathType_t's values, mirrored so that host code can reason about them.
enum class ConvMathType : uint8_t { kDefault = 0, kTensorOp = 1, kTensorOpAllowConversion = 2, kFma = 3 };

// One entry of cuDNN's ranked list (cudnnConvolution*AlgoPerf_t).
struct ConvCandidate {
  int algo = 0;
  bool ok = false;  // status == CUDNN_STATUS_SUCCESS
  size_t workspace = 0;
  ConvMathType math = ConvMathType::kDefault;
};

// Whether a candidate's math keeps the dtype's contract: exact f32 allows only FMA kernels (cuDNN's
// default math may use TF32 on sm_80+); f32 never allows down-conversion to f16; 16-bit and f64 allow any.
bool conv_math_allowed(DType dtype, ConvMath math, ConvMathType candidate);

// Index of the first (fastest-ranked) candidate that succeeded, fits the workspace limit and keeps the
// contract; -1 when none does.
int pick_conv_candidate(std::span<const ConvCandidate> candidates, DType dtype, ConvMath math, size_t workspace_limit);

}  // namespace mantissa::gpu
