// The per-block and per-element math of block-scaled quantization (ops/fp8/blocks.h), once for both devices as
// MT_HD functions: the four scale rules, the E2M1 (FP4) rounding, nearest and stochastic, and one element's
// cast with its overflow and underflow tests. The CPU kernel (ops/fp8/blocks.cc) and the CUDA kernel
// (ops/fp8/blocks.cu) call these: the GPU gave the CPU's bits on the H200 (bench/gpu/2026-11-28-run2). No CUDA
// headers.
//
// Sources of the rules (each checked bit for bit against torchao 0.18 where torchao has it: tests/golden/mx.h5,
// tests/golden/fp4.h5, scripts/golden/):
// - kF32 and kF32Pow2: torchao's float8 scaling (torchao/float8/float8_utils.py amax_to_scale: fp8_max /
//   clamp(amax, 1e-12) in f64, rounded to f32; with round_scales_to_power_of_2, exp2(floor(log2(scale))),
//   computed here exactly as the scale with its fraction bits cleared). Elements x * scale, saturated to the
//   format's max.
// - kE8M0: the OCP Microscaling Formats v1.0 specification, section 6.3, as torchao's to_mx computes it with
//   ScaleCalculationMode.FLOOR (torchao/prototype/mx_formats/mx_tensor.py): the block's E8M0 exponent is
//   floor(log2(amax)) - emax(element), read off amax's f32 exponent field, clamped to [-127, 128]; elements x
//   divided by 2^exponent in f32 (at least the smallest normal), clamped to +-max, rounded to nearest even.
// - kE8M0Rceil: the same E8M0 scale rounded up instead (cuBLAS's rule for MX on Blackwell; torchao's
//   ScaleCalculationMode.RCEIL): mx_scale_rceil below; elements multiplied by 2^(127 - s), clamped, rounded.
// - kNvfp4: NVIDIA's NVFP4 (blocks of 16 E2M1 values, an E4M3 scale per block, an f32 scale per tensor) as
//   torchao's nvfp4_quantize computes it (torchao/prototype/mx_formats/nvfp4_tensor.py): the per-tensor decode
//   scale P = amax(tensor) / (448 * 6); a block's E4M3 decode scale d = e4m3(clamp(block_amax / 6 / P,
//   2^-6, 448)); elements x * ((1 / P) / d) (a rounded reciprocal, as torchao: not x / (P * d)) clamped to +-6,
//   rounded to nearest even in E2M1. Dequantized: e * (P * d). One deviation, for training: an all-zero tensor
//   takes P = 1 (Transformer Engine's guard), where torchao's eager code makes it nan.
#pragma once

#include <cmath>
#include <cstdint>

#include "framework/float8.h"
#include "framework/host_device.h"
#include "framework/philox.h"
#include "ops/fp8/fp8_math.h"

namespace mantissa::fp8 {

// The element formats a block holds. E2M1 (FP4: sign, 2 exponent bits, 1 mantissa bit; 0, 0.5, 1, 1.5, 2, 3,
// 4, 6; no inf or nan) has no dtype of its own: every E2M1 value is exactly an E4M3 value, so an E2M1 element is
// stored as the E4M3 byte of its value (1 byte per element, as torchao's unpacked form), and the scaled GEMMs
// read it as E4M3 with exact products.
enum class BlockElement : uint8_t { kE4M3, kE5M2, kE2M1 };

// How a block's scale is chosen from its amax (see the header).
enum class BlockScaleRule : uint8_t { kF32, kF32Pow2, kE8M0, kNvfp4, kE8M0Rceil };

inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kE4M3Tiny = 0.015625f;  // 2^-6, the smallest normal E4M3 (torch.finfo(e4m3).tiny)

MT_HD constexpr float element_max(BlockElement e) {
  return e == BlockElement::kE4M3 ? kE4M3Max : (e == BlockElement::kE5M2 ? kE5M2Max : kE2M1Max);
}
// emax of an element format: the exponent of its largest power of two (8 for E4M3, 15 for E5M2, 2 for E2M1).
MT_HD constexpr int element_emax(BlockElement e) {
  return e == BlockElement::kE4M3 ? 8 : (e == BlockElement::kE5M2 ? 15 : 2);
}

MT_HD inline uint32_t bits_of(float f) { return __builtin_bit_cast(uint32_t, f); }
MT_HD inline float float_of(uint32_t b) { return __builtin_bit_cast(float, b); }

// ---- MX (E8M0) scales ----

// The biased E8M0 exponent of a block whose largest |value| is `amax` (nan when a value is nan), for an element
// format of emax `emax`: the FLOOR rule. An inf amax reads its exponent field (255 - 127 - emax), as torchao.
MT_HD inline uint8_t mx_scale_floor(float amax, int emax) {
  if (amax != amax) return 255;
  int e = static_cast<int>((bits_of(amax) >> 23) & 0xffu) - 127 - emax;
  e = e < -127 ? -127 : (e > 128 ? 128 : e);
  return static_cast<uint8_t>(e + 127);
}
// The biased E8M0 exponent under the RCEIL rule (cuBLAS's MX scale rule, Blackwell's cvt.rp.satfinite.ue8m0 and
// Transformer Engine's MXFP8 casts; torchao's ScaleCalculationMode.RCEIL): the block's decode scale amax / max
// rounded up to a power of two, ceil(log2(amax / max)) read off the quotient's bits exactly (a fraction rounds up),
// clamped to [-127, 127]; 255 for a nan amax, 254 for an inf. torchao's eager code takes log2 in f32, which
// rounds a quotient within an f32 ulp or so above a power of two down onto it: there it is one power lower.
MT_HD inline uint8_t mx_scale_rceil(float amax, float element_max_value) {
  const float d = amax / element_max_value;
  const uint32_t b = bits_of(d) & 0x7fffffffu;
  if (b > 0x7f800000u) return 255;
  if (b == 0x7f800000u) return 254;
  const int field = static_cast<int>(b >> 23), frac = static_cast<int>(b & 0x7fffffu);
  int e;
  if (field != 0) {
    e = field - 127 + (frac != 0 ? 1 : 0);
  } else {          // subnormal (or zero): frac * 2^-149, at most 2^-126
    int width = 0;  // bit_width(frac - 1): ceil(log2(frac)) for frac >= 1
    for (int v = frac - 1; v > 0; v >>= 1) ++width;
    e = frac == 0 ? -127 : -149 + width;
  }
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint8_t>(e + 127);
}
// What an element is multiplied by under RCEIL for scale `s` (torchao's _to_mx_rceil): 2^(127 - s), 1 for s = 0
// (torchao's guard: a block whose values are all below 2^-127 of the format's max), 2^-127 for 254 (inf), nan for
// 255.
MT_HD inline float mx_rceil_multiplier(uint8_t s) {
  if (s == 255) return float_of(0x7fc00000u);
  if (s == 254) return float_of(uint32_t{1} << 22);
  return s == 0 ? 1.0f : float_of(static_cast<uint32_t>(254 - s) << 23);
}
// What x is divided by for scale `s`: 2^(s - 127) as f32 bits, at least the smallest normal (s = 0), +inf for
// 255 (torchao's scale_fp32).
MT_HD inline float mx_division_scale(uint8_t s) {
  const float f = float_of(static_cast<uint32_t>(s) << 23);
  return f < 1.17549435e-38f ? 1.17549435e-38f : f;
}
// What an element is multiplied by for scale `s`: 2^(s - 127) (2^-127 is an f32 subnormal), nan for 255.
MT_HD inline float mx_dequant_scale(uint8_t s) {
  if (s == 255) return float_of(0x7fc00000u);
  return s == 0 ? float_of(uint32_t{1} << 22) : float_of(static_cast<uint32_t>(s) << 23);
}

// ---- E2M1 rounding ----

// y rounded to the nearest E2M1 value, ties to even, saturated at +-6 (+-inf too); nan stays nan (torchao clamps
// to +-6 before its cast; a nan passes the clamp). Within each binade the E2M1 grid is uniform (steps 0.5 below
// 2, 1 below 4, 2 up to 6) and an even multiple of the step is an even mantissa, so rounding |y| / step (exact:
// the step is a power of two) to the nearest integer, ties to even, is the rule: (q + 2^23) - 2^23 in f32 does it
// for 0 <= q < 2^23. The comparisons are on the bits (|y| orders like its bits, nan above inf) and the rest is
// arithmetic and selects: float comparisons would keep GCC from vectorizing the CPU's loops (-ftrapping-math).
MT_HD inline float round_e2m1(float y) {
  const uint32_t ab = bits_of(y) & kAbsMask;
  const float a = float_of(ab);
  const float inv = ab < 0x40000000u ? 2.0f : (ab < 0x40800000u ? 1.0f : 0.5f);  // 1 / step: |y| < 2, < 4
  const float q = ab < 0x40c00000u ? a * inv : 0.0f;                             // |y| < 6; the rest replaced
  uint32_t r = bits_of(((q + 8388608.0f) - 8388608.0f) / inv);
  r = ab >= 0x40c00000u ? 0x40c00000u : r;  // 6
  r = ab > kInfBits ? ab : r;               // nan
  return float_of(r | (bits_of(y) & 0x80000000u));
}

// y rounded stochastically to one of its two E2M1 neighbours: up with probability (|y| - lower) / step, from
// 24 random bits (the top of `random`): unbiased to within 2^-24 of a step. Saturated at +-6, nan stays nan.
// The NVFP4 training recipe rounds gradients this way (Blackwell's cvt.rs adds 8 random bits below the kept
// mantissa and truncates: the same distribution, to within 2^-8 of a step; Transformer Engine's fallback,
// transformer_engine/common/util/ptx.cuh). Bit comparisons as round_e2m1's.
MT_HD inline float round_e2m1_stochastic(float y, uint32_t random) {
  const uint32_t ab = bits_of(y) & kAbsMask;
  const float a = float_of(ab);
  const float inv = ab < 0x40000000u ? 2.0f : (ab < 0x40800000u ? 1.0f : 0.5f);
  const float step = ab < 0x40000000u ? 0.5f : (ab < 0x40800000u ? 1.0f : 2.0f);  // 1 / inv
  const float q = ab < 0x40c00000u ? a * inv : 0.0f;                              // exact; below 12
  const float lower = truncf(q);                                                  // floor: q >= 0
  const float frac = q - lower;                                                   // exact
  const float r =
      static_cast<float>(static_cast<int32_t>(random >> 8)) * 5.9604644775390625e-08f;  // [0, 1), 2^-24 steps
  const float up = bits_of(r) < bits_of(frac) ? 1.0f : 0.0f;                            // r < frac, both >= 0
  uint32_t v = bits_of((lower + up) * step);                                            // exact: a power of two
  v = ab >= 0x40c00000u ? 0x40c00000u : v;
  v = ab > kInfBits ? ab : v;
  return float_of(v | (bits_of(y) & 0x80000000u));
}

// The 4-bit E2M1 code of an E2M1 value (sign bit 3, exponent bits 2-1, mantissa bit 0): for golden files.
MT_HD inline uint8_t e2m1_code(float v) {
  const float a = fabsf(v);
  const uint8_t mag = a < 0.25f   ? 0
                      : a < 0.75f ? 1
                      : a < 1.25f ? 2
                      : a < 1.75f ? 3
                      : a < 2.5f  ? 4
                      : a < 3.5f  ? 5
                      : a < 5.0f  ? 6
                                  : 7;
  return static_cast<uint8_t>(((bits_of(v) >> 31) != 0u ? 8u : 0u) | mag);
}

// The random word for element `index` of a stochastically rounded cast: word index % 4 of the Philox4x32-10 block
// (counter index / 4, offset) under key `seed`. A cast is reproducible from (seed, offset), and two casts with
// different offsets draw independent streams.
MT_HD inline uint32_t rounding_bits(uint64_t seed, uint64_t offset, uint64_t index) {
  return philox_word(index, static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), seed);
}

// ---- one block's scale ----

// What a block's elements are computed with: y = x * mul when `divide` is false, else y = x / div; and what
// an element is multiplied by to get x back (dequant, f32), with the stored form of the scale where the rule
// has one (the E8M0 exponent, the E4M3 byte; 0 otherwise).
struct BlockScale {
  bool divide = false;
  float mul = 1.0f;
  float div = 1.0f;
  float dequant = 1.0f;
  uint32_t stored = 0;
};

// The scale of a block with largest |value| `amax`. pow2_margin is 2^margin (kF32 and kF32Pow2); for kNvfp4,
// two_level says whether the tensor has a per-tensor decode scale P (tensor_decode), else the block scales stand
// alone (torchao's per_tensor_scale=None).
MT_HD inline BlockScale block_scale(BlockScaleRule rule, BlockElement element, float amax, float pow2_margin,
                                    bool two_level = false, float tensor_decode = 1.0f) {
  BlockScale s;
  switch (rule) {
    case BlockScaleRule::kF32:
    case BlockScaleRule::kF32Pow2: {
      // torchao's amax_to_scale: max / clamp(amax, 1e-12) in f64, rounded once to f32 (a nan stays nan).
      const double a = static_cast<double>(amax);
      float scale =
          static_cast<float>(static_cast<double>(element_max(element)) / (a < 1e-12 ? 1e-12 : a)) / pow2_margin;
      // exp2(floor(log2(scale))) exactly: a normal scale with its fraction bits cleared (log2f could round up
      // to the next integer within an ulp of a power of two; the bits cannot).
      if (rule == BlockScaleRule::kF32Pow2 && scale == scale && scale > 0.0f && scale < float_of(kInfBits)) {
        scale = float_of(bits_of(scale) & 0x7f800000u);
      }
      s.mul = scale;
      s.dequant = reciprocal(scale);
      break;
    }
    case BlockScaleRule::kE8M0: {
      const uint8_t e = mx_scale_floor(amax, element_emax(element));
      s.divide = true;
      s.div = mx_division_scale(e);
      s.dequant = mx_dequant_scale(e);
      s.stored = e;
      break;
    }
    case BlockScaleRule::kE8M0Rceil: {
      const uint8_t e = mx_scale_rceil(amax, element_max(element));
      s.mul = mx_rceil_multiplier(e);
      s.dequant = mx_dequant_scale(e);
      s.stored = e;
      break;
    }
    case BlockScaleRule::kNvfp4: {
      // torchao's nvfp4_quantize: the block's scale amax / 6 (over P), clamped to [2^-6, 448] (a nan passes)
      // and rounded to E4M3; elements multiplied by a rounded reciprocal, not divided.
      float block = amax / kE2M1Max;
      if (two_level) block = block / tensor_decode;
      if (block == block) block = block < kE4M3Tiny ? kE4M3Tiny : (block > kE4M3Max ? kE4M3Max : block);
      const uint8_t byte = Fp8E4M3Format::from_f32_bits(bits_of(block), Fp8Overflow::kSaturate);
      const float d = float_of(Fp8E4M3Format::to_f32_bits(byte));
      s.mul = two_level ? (1.0f / tensor_decode) / d : 1.0f / d;
      s.dequant = d;  // P is applied once, by the GEMM's alpha (or dequantize_blocks)
      s.stored = byte;
      break;
    }
  }
  return s;
}

// NVFP4's per-tensor decode scale from the tensor's amax: amax / (448 * 6) in f32 (torchao's
// per_tensor_amax_to_scale), or 1 for an all-zero tensor (Transformer Engine's guard: torchao's eager quantizer
// would divide 0 by 0 and make every element nan).
MT_HD inline float nvfp4_tensor_decode(float amax) { return amax == 0.0f ? 1.0f : amax / (kE4M3Max * kE2M1Max); }

// ---- one element ----

struct ElementStats {
  uint32_t overflow = 0;   // |y| beyond the format's range: saturated (or inf/nan with kNoSaturate)
  uint32_t underflow = 0;  // x finite and not 0, its element 0
};

// y of one element: x * mul, or x / div for the rules that divide.
MT_HD inline float scaled(float x, const BlockScale& s) { return s.divide ? x / s.div : x * s.mul; }

// One element of a block cast from x and its scaled y: rounded (stochastically from `random` when `stochastic`,
// E2M1 only) and encoded as the element's byte (E2M1 as the E4M3 byte of its value). MX and NVFP4 clamp y to
// +-max before the cast, as torchao does (the same byte as a saturating cast). Branch-free apart from the
// element format and `stochastic`, which are constant over a loop, so the CPU's loops vectorize it.
MT_HD inline uint8_t encode_element(float x, float y, BlockElement element, Fp8Overflow overflow, bool stochastic,
                                    uint32_t random, ElementStats& stats) {
  uint8_t byte;
  bool zero;
  // Bitwise & on the conditions (no short circuits: no control flow in a vectorized loop).
  if (element == BlockElement::kE2M1) {
    const float v = stochastic ? round_e2m1_stochastic(y, random) : round_e2m1(y);
    const uint32_t aby = bits_of(y) & kAbsMask;
    stats.overflow += static_cast<uint32_t>(aby > 0x40c00000u) & static_cast<uint32_t>(aby <= kInfBits);  // > 6
    byte = Fp8E4M3Format::from_f32_bits(bits_of(v), Fp8Overflow::kSaturate);
    zero = (bits_of(v) & kAbsMask) == 0u;
  } else if (element == BlockElement::kE4M3) {
    stats.overflow += static_cast<uint32_t>(overflows<Fp8E4M3Format>(bits_of(y)));
    byte = Fp8E4M3Format::from_f32_bits(bits_of(y), overflow);
    zero = (byte & 0x7fu) == 0u;
  } else {
    stats.overflow += static_cast<uint32_t>(overflows<Fp8E5M2Format>(bits_of(y)));
    byte = Fp8E5M2Format::from_f32_bits(bits_of(y), overflow);
    zero = (byte & 0x7fu) == 0u;
  }
  const uint32_t ax = bits_of(x) & kAbsMask;
  stats.underflow +=
      static_cast<uint32_t>(zero) & static_cast<uint32_t>(ax != 0u) & static_cast<uint32_t>(ax < kInfBits);
  return byte;
}

// One element of a block cast: encode_element of x scaled by its block's scale.
MT_HD inline uint8_t cast_element(float x, const BlockScale& s, BlockElement element, Fp8Overflow overflow,
                                  bool stochastic, uint32_t random, ElementStats& stats) {
  return encode_element(x, scaled(x, s), element, overflow, stochastic, random, stats);
}

// ---- Blackwell's block-scaled GEMM operands (cuBLASLt, ops/fp8/blocks.cu) ----

// The E8M0 byte s whose mx_dequant_scale(s) is `dequant`: its f32 exponent field, 0 for 2^-127 (an f32
// subnormal), 255 for nan. Only for the dequantization factors of kE8M0 and kE8M0Rceil blocks (powers of two).
MT_HD inline uint8_t mx_scale_of(float dequant) {
  const uint32_t b = bits_of(dequant) & kAbsMask;
  if (b > kInfBits) return 255;
  return b == (uint32_t{1} << 22) ? uint8_t{0} : static_cast<uint8_t>(b >> 23);
}

// The 4-bit E2M1 code of an element stored as the E4M3 byte of its value (the form quantize_blocks writes).
MT_HD inline uint8_t e2m1_code_of_e4m3(uint8_t byte) { return e2m1_code(float_of(Fp8E4M3Format::to_f32_bits(byte))); }

// Two consecutive E2M1 elements of a row (E4M3 bytes) as one byte of packed FP4: the first in the low nibble
// (PyTorch's float4_e2m1fn_x2 and torchao's pack_uint4; cuBLASLt's CUDA_R_4F_E2M1 reads that order).
MT_HD inline uint8_t pack_e2m1_pair(uint8_t first, uint8_t second) {
  return static_cast<uint8_t>(e2m1_code_of_e4m3(first) | (e2m1_code_of_e4m3(second) << 4));
}

// Where cuBLASLt reads the scale of (row, block) for the VEC32_UE8M0 and VEC16_UE4M3 modes: the [rows, blocks]
// grid of one byte per block is padded to a multiple of 128 rows and of 4 blocks (the padding holds zeros) and
// cut into 128 x 4 tiles of 512 bytes, stored one after another along a row of tiles, then the next row of
// tiles; inside a tile, rows r and r + 32, r + 64, r + 96 share a 16-byte line: (r % 32) * 16 + (r / 32) * 4 +
// block % 4. NVIDIA's cuBLAS documentation ("1D Block Scaling Factors Layout"); torchao's to_blocked and nvmath's
// to_block_scale compute the same order. `padded_blocks` is blocks rounded up to a multiple of 4.
MT_HD inline int64_t block_scale_offset(int64_t row, int64_t block, int64_t padded_blocks) {
  const int64_t tile = (row / 128) * (padded_blocks / 4) + block / 4;
  const int64_t r = row % 128;
  return tile * 512 + (r % 32) * 16 + (r / 32) * 4 + block % 4;
}
// The bytes of that padded grid.
MT_HD inline int64_t block_scale_bytes(int64_t rows, int64_t blocks) {
  return (rows + 127) / 128 * 128 * ((blocks + 3) / 4 * 4);
}

}  // namespace mantissa::fp8
