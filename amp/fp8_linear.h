// fp8_linear: y = x w^T + b with x and w cast to FP8 by their roles' scales and the GEMM done by scaled_mm
// (ops/fp8/fp8.h), with its own backward. Letters: M rows of x (every leading dim folded), K in features, N out
// features. Per-tensor recipes (delayed, dynamic):
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
//
// Block-scaled recipes (Fp8Recipe::block_scaled()) quantize every operand of every GEMM along that GEMM's K
// (ops/fp8/blocks.h), with a scale per row (rowwise) or per block (blockwise 128, MX 32, NVFP4 16):
//   forward   x [M, K] along K; w [N, K] along K (square blocks for blockwise's 128x128, nvfp4's 16x16)
//   dgrad     g [M, N] along N (stochastically rounded: nvfp4/mxfp4 with sr=1); w along N: the forward's
//             square blocks transposed, else re-quantized from w (rowwise, mxfp8, mxfp4, nvfp4 weight_2d=0)
//   wgrad     g^T [N, M] and x^T [K, M] along M (the batch), each re-quantized from g and x; for nvfp4/mxfp4
//             with hadamard=1 both first rotated by the 16x16 Hadamard transform along M (ops/fp8/blocks.h)
// So the forward keeps x and w in their own precision (not FP8: the backward re-quantizes them), and the
// backward does three casts more than the per-tensor recipes' one (two with square weight blocks): each a pass
// over its tensor. Every cast records its amax, overflows and underflows into its role's state.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "amp/fp8_recipe.h"
#include "amp/fp8_scaling.h"
#include "framework/tensor.h"

namespace mantissa::amp {

// The scaling state of one FP8 linear: one Fp8TensorState per role, and the recipe it follows.
struct Fp8LinearState {
  std::string name;  // the weight's parameter name, for stats and messages
  Fp8Recipe recipe;
  std::array<Fp8TensorState, 3> roles;
  // Stochastic rounding (nvfp4, mxfp4 with sr=1): the Philox key of this linear and the casts rounded so far;
  // cast i draws offset i (ops/fp8/block_math.h), so a run resumed with the count continues bit for bit.
  uint64_t rounding_seed = 0;
  int64_t rounding_calls = 0;

  static std::shared_ptr<Fp8LinearState> make(std::string name, const Fp8Recipe& recipe, Device device,
                                              uint64_t rounding_seed = 0);
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
