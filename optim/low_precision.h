// The low-precision pieces of issue 36's optimizer ladder, written once for the CPU loops and the CUDA kernels
// (MT_HD): bfloat16 with stochastic rounding, the Kahan-compensated bfloat16 update, and block-wise 8-bit
// quantization to Dettmers et al.'s dynamic map ("8-bit Optimizers via Block-wise Quantization", 2022; the map
// from "8-Bit Approximations for Parallelism in Deep Learning", 2016). The optimizers are to store parameters and
// moments through these (issue 36; not wired yet, and no .cu includes this header yet, so nvcc has not compiled
// it); tests/optim/low_precision_test.cc checks them against torchao's and bitsandbytes' own answers
// (tests/golden/low_precision_optim.h5) and against their statistical promises.
#pragma once

#include <cstdint>

#include "framework/host_device.h"
#include "framework/philox.h"

namespace mantissa::low_precision {

MT_HD inline uint32_t bits_of(float f) { return __builtin_bit_cast(uint32_t, f); }
MT_HD inline float float_of(uint32_t b) { return __builtin_bit_cast(float, b); }
MT_HD inline float bf16_value(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

// float -> bfloat16, round to nearest even; a nan stays a quiet nan (framework/half.h's rule, here for devices).
MT_HD inline uint16_t bf16_nearest(float x) {
  const uint32_t b = bits_of(x);
  const uint32_t nan = static_cast<uint32_t>((b & 0x7fffffffu) > 0x7f800000u);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan != 0u ? ((b >> 16) | 0x40u) : rounded);
}

// float -> bfloat16 with stochastic rounding: away from zero when the low 16 bits of `random` are below the 16
// bits the cast drops (so with probability (x - toward_zero) / ulp: unbiased), else toward zero. torchao's rule
// (torchao.optim.quant_utils._fp32_to_bf16_sr), bit for bit. A value above bfloat16's largest finite can round
// up to inf, as there; a nan stays a quiet nan (torchao's integer arithmetic can turn one into inf).
MT_HD inline uint16_t bf16_stochastic(float x, uint32_t random) {
  const uint32_t b = bits_of(x);
  const uint32_t nan = static_cast<uint32_t>((b & 0x7fffffffu) > 0x7f800000u);
  const uint32_t up = (random & 0xffffu) < (b & 0xffffu) ? 0x10000u : 0u;
  const uint32_t rounded = ((b & 0xffff0000u) + up) >> 16;
  return static_cast<uint16_t>(nan != 0u ? ((b >> 16) | 0x40u) : rounded);
}

// The random word of element `index` of a parameter's update: word index % 4 of Philox4x32-10 block index / 4
// under key `seed`, with the parameter's stream id and its step count as the rest of the counter. A parameter's
// rounding is a function of (seed, stream, step, index): a resumed run (the step count is saved) draws the same
// words, and no two parameters or steps share one.
MT_HD inline uint32_t update_random(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index) {
  return philox_word(index, stream, step, seed);
}

// A bfloat16 parameter p moved to the f32 value `target` through a bfloat16 compensation c (Kahan summation of the
// updates, Zamirai et al., "Revisiting BFloat16 Training", 2020): the update target - p, less what earlier
// roundings lost (c), is added to p and rounded to nearest; what that rounding lost is kept in c for the next
// step. Over many steps p follows the f32 sum of the updates to within its own rounding, where plain rounding to
// nearest drops every update smaller than half of p's ulp.
MT_HD inline void kahan_bf16(uint16_t& p, uint16_t& c, float target) {
  const float pv = bf16_value(p);
  const float y = (target - pv) - bf16_value(c);  // the update, corrected
  const uint16_t t = bf16_nearest(pv + y);
  const float lost = (bf16_value(t) - pv) - y;  // what the rounding added beyond y (exact for t near pv)
  p = t;
  c = bf16_nearest(lost);
}

// ---- 8-bit block-wise quantization ----

constexpr int kMapSize = 256;
constexpr int64_t kQuantBlock = 2048;  // Dettmers et al.'s block (bitsandbytes' optimizers' default)

// The dynamic map (8 bits, up to 7 exponent bits), sorted ascending, as bitsandbytes publishes it
// (bitsandbytes.functional.create_dynamic_map): signed for Adam's first moment, unsigned for its second.
const float* dynamic_map(bool is_signed);

// The entry of the sorted map nearest to v (ties: the lower entry, the rule bitsandbytes' quantizer states; below
// the first entry: the first). A binary search, then the nearer of the two neighbours: the same on both devices.
// A nan gives the first entry.
MT_HD inline uint8_t nearest_code(const float* map, float v);

// The largest i with map[i] <= v (0 when none, and for a nan): a binary search (lo + step stays below kMapSize).
MT_HD inline int floor_index(const float* map, float v) {
  int lo = 0;
  for (int step = kMapSize / 2; step >= 1; step /= 2) lo = map[lo + step] <= v ? lo + step : lo;
  return lo;
}

// Entry lo = floor_index(map, v) or its successor, whichever is nearer to v (ties: lo).
MT_HD inline uint8_t nearer_of(const float* map, int lo, float v) {
  const int hi = lo + 1 < kMapSize ? lo + 1 : lo;
  const float dl = v - map[lo] < 0.0f ? map[lo] - v : v - map[lo];
  const float dh = map[hi] - v < 0.0f ? v - map[hi] : map[hi] - v;
  return static_cast<uint8_t>(dh < dl ? hi : lo);
}

MT_HD inline uint8_t nearest_code(const float* map, float v) { return nearer_of(map, floor_index(map, v), v); }

// The smallest entry of the sorted map at or above v (above the last entry: the last). A nan gives the first entry.
// Adam's second moment is stored this way (optim/precision_ladder.h): Adam divides by its square root, so a moment
// rounded down, to 0 at worst, inflates the update without bound (m / eps), where one rounded up shrinks it by at
// most one step of the map.
MT_HD inline uint8_t at_or_above(const float* map, uint8_t nearest, float v) {
  // map[nearest] or its successor brackets v: the successor when the nearest lies below v.
  return static_cast<uint8_t>(map[nearest] < v && nearest + 1 < kMapSize ? nearest + 1 : nearest);
}
MT_HD inline uint8_t upper_code(const float* map, float v) { return at_or_above(map, nearest_code(map, v), v); }

// How a value's code is chosen: the nearest entry (bitsandbytes' rule), or the nearest at or above it.
enum class CodeRounding : uint8_t { kNearest, kUp };
MT_HD inline uint8_t code_of(const float* map, float v, CodeRounding r) {
  return r == CodeRounding::kUp ? upper_code(map, v) : nearest_code(map, v);
}

// The host's fast form of floor_index for one of the two dynamic maps: a table indexed by a float's top 16 bits
// (sign, exponent, 7 mantissa bits) gives the floor of the smallest float with those bits, and a short scan up
// finds v's (a map entry is more than 1% from its neighbours, a 16-bit prefix less than 1% wide). The same index
// as the binary search for every float (tests/optim/low_precision_test.cc), in a few steps instead of eight
// dependent loads.
int floor_index_fast(bool is_signed, float v);

// The host's block-wise quantization of x [n] in blocks of `block` (the last may be shorter): each block's absmax
// (max |x|, f32), then each value's nearest_code of x / absmax in the signed or unsigned map (a block of zeros
// has absmax 0 and every value the code of 0; bitsandbytes divides by that 0). The reference the optimizers'
// 8-bit state is tested against, and their CPU path's per-block step.
void quantize_blockwise(const float* x, int64_t n, int64_t block, bool is_signed, uint8_t* codes, float* absmax,
                        CodeRounding rounding = CodeRounding::kNearest);
// map[code] * absmax of its block.
void dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, bool is_signed,
                          float* out);

}  // namespace mantissa::low_precision
