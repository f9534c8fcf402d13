// The per-element math of the FP8 ops (ops/fp8/fp8.h), once for both devices as MT_HD functions over float bits:
// the overflow test of a quantization, the amax fold, one element of the quantize pass, the scaling state's
// per-cast updates and the scaled matmul's epilogue. The CPU kernels (ops/fp8/fp8_cpu.cc) and the CUDA kernels
// (ops/fp8/fp8.cu) call these, so the GPU is written to compute the CPU's bits (never run). No CUDA headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "framework/float8.h"
#include "framework/host_device.h"

namespace mantissa::fp8 {

inline constexpr uint32_t kAbsMask = 0x7fffffffu;
inline constexpr uint32_t kInfBits = 0x7f800000u;

// The bits of the smallest non-negative float whose cast to Format overflows: it rounds above the format's
// maximum (or is inf). Found by bisection over the (monotone) bit patterns between the maximum and inf, with
// the format's own conversion deciding, so the rounding rule is the one framework/float8.h implements: a
// value overflows exactly where the saturating and the non-saturating cast disagree.
template <typename Format>
MT_HD constexpr uint32_t overflow_threshold_bits() {
  uint32_t lo = 0x3f800000u, hi = kInfBits;  // 1.0 fits in both formats; inf overflows
  while (hi - lo > 1u) {
    const uint32_t mid = lo + (hi - lo) / 2u;
    if (Format::from_f32_bits(mid, Fp8Overflow::kSaturate) != Format::from_f32_bits(mid, Fp8Overflow::kNoSaturate)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

template <typename Format>
struct Thresholds {
  static constexpr uint32_t kOverflow = overflow_threshold_bits<Format>();
};

// E4M3: 448 (1.75 * 2^8) is the maximum; 464 lies halfway to the next step, 480, and rounds to even, down
// to 448, so everything above 464 overflows. E5M2: 57344 (1.75 * 2^15) is the maximum; 61440 lies halfway to
// the next step, 65536, and rounds to even, up: it overflows.
static_assert(Thresholds<Fp8E4M3Format>::kOverflow == 0x43e80001u);  // the float after 464
static_assert(Thresholds<Fp8E5M2Format>::kOverflow == 0x47700000u);  // 61440

// Whether y (as its bits, y = x * scale) overflows Format: |y| at or above the threshold, nan excluded.
template <typename Format>
MT_HD inline bool overflows(uint32_t y_bits) {
  const uint32_t abs = y_bits & kAbsMask;
  return abs >= Thresholds<Format>::kOverflow && abs <= kInfBits;
}

// amax as bits: |x| of a float orders like its bits as an unsigned integer, and every nan's bits lie above
// inf's, so the integer maximum of (bits & kAbsMask) is max |x| with nan propagating, in any order of
// folding. That makes the CPU's blocked fold and the GPU's atomicMax give the same bits.
MT_HD inline uint32_t abs_bits(uint32_t x_bits) { return x_bits & kAbsMask; }

// f16 bits -> f32 bits, exactly, with framework/half.h's (and F16C's) result for every pattern (a nan keeps its
// payload and comes out quiet), but branch-free, so that the quantize sweep vectorizes with it.
MT_HD inline uint32_t half_to_f32_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  const uint32_t inf_nan = (em << 13) | kInfBits | (em > 0x7c00u ? 0x400000u : 0u);
  // Zero and subnormals: em * 2^-24, exact in f32.
  const float sub = static_cast<float>(static_cast<int32_t>(em)) * 5.9604644775390625e-08f;
  uint32_t sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof(sub_bits));
  return sign | (em >= 0x7c00u ? inf_nan : (em < 0x400u ? sub_bits : normal));
}

// One element of the quantize pass, from the bits of x and of y = x * scale (the product computed in f32 by the
// caller): folds |x| into amax_bits, counts y's overflow, and an underflow when x is finite and not 0 but its
// byte is a zero; returns y's FP8 byte. Branch-free, so the CPU's sweep vectorizes it; the CUDA kernel is written
// to run it per thread.
template <typename Format>
MT_HD inline uint8_t quantize_one(uint32_t x_bits, uint32_t y_bits, Fp8Overflow overflow, uint32_t& amax_bits,
                                  uint32_t& count, uint32_t& zeros) {
  const uint32_t a = abs_bits(x_bits);
  amax_bits = a > amax_bits ? a : amax_bits;
  count += overflows<Format>(y_bits) ? 1u : 0u;
  const uint8_t byte = Format::from_f32_bits(y_bits, overflow);
  zeros += static_cast<uint32_t>((byte & 0x7fu) == 0u) & static_cast<uint32_t>(a != 0u) &
           static_cast<uint32_t>(a < kInfBits);
  return byte;
}

// The scaling state's per-cast arithmetic (amp/fp8_scaling.h), which the folded quantize_fp8 (ops/fp8/fp8.h)
// does after its sweep: the very f32 operations of the small tensor ops it replaces, in their order.
// Dynamic scaling's scale, torchao's tensorwise with TE's margin: fp8_max / clamp(amax, 1e-12) / 2^margin
// (a nan amax stays nan through the clamp and gives a nan scale).
MT_HD inline float dynamic_scale(float amax, float fp8_max, float pow2_margin) {
  const float clamped = amax != amax ? amax : (amax < 1e-12f ? 1e-12f : amax);
  return fp8_max / clamped / pow2_margin;
}
MT_HD inline float reciprocal(float scale) { return 1.0f / scale; }
// The amax history's fold of one cast's amax into the current entry: the maximum of the pair (entry, amax) as
// ops/reduce's max takes it, entry first: a nan entry stays, a nan amax replaces the entry, else the larger
// (on a tie the entry: -0 stays -0).
MT_HD inline float fold_amax(float entry, float amax) {
  if (entry != entry) return entry;
  return amax != amax || amax > entry ? amax : entry;
}

// The scaled matmul's epilogue on one f32 accumulator: acc * scale + bias with one f32 rounding (an fma),
// or acc * scale without a bias (an fma with +0 would turn a -0 product into +0). scale = scale_inv_a *
// scale_inv_b (per-tensor scales), computed once in f32.
MT_HD inline float epilogue(float acc, float scale, float bias) { return fmaf(acc, scale, bias); }
MT_HD inline float epilogue(float acc, float scale) { return acc * scale; }
// With a row scale and a column scale (rowwise scaling) the column's is applied first, then the row's, each product
// rounded: (acc * col) * row. That is the H200's order (cuBLASLt's OUTER_VEC scales, fast accumulation off: 12288 of
// 12288 f32 outputs, bench/gpu/2026-11-28-run3); with a bias, the last product fused with it (not yet seen on a GPU).
MT_HD inline float epilogue_rowcol(float acc, float row, float col, float bias) { return fmaf(acc * col, row, bias); }
MT_HD inline float epilogue_rowcol(float acc, float row, float col) { return (acc * col) * row; }

}  // namespace mantissa::fp8
