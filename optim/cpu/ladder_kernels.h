// The CPU half of the precision ladder (optim/precision_ladder.h): a parameter whose weights or state are stored in
// bf16 or 8 bits is updated block by block: each block of low_precision::kQuantBlock (2048) elements is loaded into
// f32 (widened, or dequantized with its block's absmax), the optimizer's own CPU step (cpu::adam_step, sgd_step,
// lion_step: the element formula of optim/update_math.h, unchanged) runs on those f32 values, and the results are
// stored back: the weights rounded to bf16 (to nearest, stochastically, or Kahan-compensated), the state rounded to
// bf16 or re-quantized (a fresh absmax per block). 2048 is the 8-bit state's quantization block, so a block is
// quantized from values that are all in hand; blocks run in parallel and the result does not depend on the thread
// count.
#pragma once

#include <cstdint>

#include "optim/cpu/optim_kernels.h"
#include "optim/precision_ladder.h"

namespace mantissa::cpu {

// How one buffer is stored: f32, bf16 (uint16 bits), or 8-bit codes of the signed or unsigned dynamic map with one
// f32 absmax per block.
enum class Storage : uint8_t { kF32, kBF16, kU8Signed, kU8Unsigned };

struct LadderBuffer {
  void* data = nullptr;
  float* absmax = nullptr;  // 8-bit storage only: ceil(n / 2048) values
  Storage storage = Storage::kF32;
};

// One parameter of n elements under the ladder. The grad has the parameter's storage (f32 or bf16). compensation
// (bf16 bits) is non-null for update_rounding=kahan; copy only for fp32 masters with working copies.
constexpr int kMaxLadderState = 3;
struct LadderParam {
  LadderBuffer param;
  const void* grad = nullptr;
  uint16_t* compensation = nullptr;
  LadderBuffer state[kMaxLadderState];
  int num_state = 0;
  int64_t* step = nullptr;
  int64_t n = 0;
  uint32_t stream = 0;  // ladder_stream(name)
  // The index of element 0 in the whole parameter: nonzero for a ZeRO-1 shard (Optimizer::shard), which then draws
  // the stochastic-rounding numbers the whole parameter's elements would. A multiple of the 2048-block, so a shard's
  // 8-bit blocks are the whole parameter's.
  int64_t first = 0;
  WorkingCopyOut copy = {};
};

// Which update runs on the loaded values, with its options: the state slots are SGD's momentum_buffer; Adam's
// exp_avg, exp_avg_sq and (amsgrad) max_exp_avg_sq; Lion's exp_avg. Both devices' ladder kernels take it.
enum class LadderKind : uint8_t { kSgd, kAdam, kLion };
struct LadderOp {
  LadderKind kind = LadderKind::kAdam;
  SGDOptions sgd = {};
  AdamOptions adam = {};
  WeightDecay mode = WeightDecay::kL2;  // Adam's L2 or AdamW's decoupled decay
  LionOptions lion = {};
};

// Runs one step of parameter `t`: nothing when `s` says found_inf; else the step count advances and every block is
// loaded, updated by the optimizer's own CPU step (cpu::sgd_step, adam_step, lion_step on the block's f32 values,
// with the same `s`), and stored back.
void ladder_step(const LadderParam& t, const PrecisionLadder& ladder, const LadderOp& op, ScalingPointers s);

}  // namespace mantissa::cpu
