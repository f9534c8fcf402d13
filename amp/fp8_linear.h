// fp8_linear: y = x w^T + b with x and w cast to FP8 by their roles' scales and the GEMM done by scaled_mm
// (ops/fp8/fp8.h), with its own backward. Letters: M rows of x (every leading dim folded), K in features, N out
// features.
//
//   forward   x_fp8 = cast(x * s_x), w_fp8 = cast(w * s_w)              (E4M3)
//             y = scaled_mm(x_fp8, w_fp8^T, 1/s_x, 1/s_w) + b           out: the autocast dtype when autocast
//                                                                       is on for x's device, else x's dtype
//   backward  g_fp8 = cast(g * s_g)                                     (E5M2 in HYBRID, E4M3 in E4M3)
//             dx = scaled_mm(g_fp8, w_fp8, 1/s_g, 1/s_w)                 in x's dtype
//             dw = scaled_mm(g_fp8^T, x_fp8, 1/s_g, 1/s_x)               f32 (the master's grad)
//             db = sum of g over the rows, in f32
// The forward keeps x_fp8 and w_fp8 (1 byte per element) for the backward, not x and w. Each cast records
// its amax and overflow count into the linear's state (amp/fp8_scaling.h), unless the forward runs without
// grad (evaluation): such a forward casts with the current scales and leaves the state alone, so a validation
// pass neither moves the scales nor counts in the statistics. Not twice differentiable.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "amp/fp8_recipe.h"
#include "amp/fp8_scaling.h"
#include "framework/tensor.h"

namespace mantissa::amp {

// The scaling state of one FP8 linear: one Fp8TensorState per role.
struct Fp8LinearState {
  std::string name;  // the weight's parameter name, for stats and messages
  std::array<Fp8TensorState, 3> roles;

  static std::shared_ptr<Fp8LinearState> make(std::string name, const Fp8Recipe& recipe, Device device);
  Fp8TensorState& role(Fp8Role r) { return roles[static_cast<size_t>(r)]; }
  const Fp8TensorState& role(Fp8Role r) const { return roles[static_cast<size_t>(r)]; }
};

enum class Fp8StateUpdate { kRecord, kLeave };

// x [..., K] (f32, f16 or bf16), weight [N, K], bias [N] or undefined. `update` defaults to kRecord when grad
// mode is on and kLeave when it is off. The state must be on x's device.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const std::shared_ptr<Fp8LinearState>& state);
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const std::shared_ptr<Fp8LinearState>& state, Fp8StateUpdate update);

// One cast of a role: the FP8 data and the dequantization factor scaled_mm takes with it. Records into the
// state when `update` says so.
struct Fp8Cast {
  Tensor data;
  Tensor scale_inv;
};
Fp8Cast fp8_cast(Fp8TensorState& s, const Tensor& x, Fp8StateUpdate update);

}  // namespace mantissa::amp
