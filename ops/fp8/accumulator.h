// How the CPU's scaled_mm sums the K products of each output: in full f32 (the default, a best case), or as
// Hopper's FP8 tensor core does, bit for bit. The tensor-core model is read off the first lent GPU's record
// (an H200, cuBLAS 13.1, bench/gpu/2026-11-28: bench/gpu/fp8_accum_fit.py reproduces all 1.1 million recorded
// outputs; tests/golden/fp8_accum_h200.h5 holds a slice that tests/ops/fp8_accumulator_test.cc checks):
//
// - The products are taken `group` at a time (32: one K step of Hopper's FP8 MMA). Each step aligns its
//   products and the running sum to one anchor: the largest of the products' exponent sums e_a + e_b (the
//   unbiased exponents of the two FP8 factors, subnormals at the format's minimum; not the exponent of the
//   product's value, whose significand product lies in [1, 4)) and the running sum's exponent.
// - Every product and the running sum are cut toward zero to a multiple of 2^(anchor - retained_bits), the
//   pieces summed exactly, and the sum cut toward zero to retained_bits + 1 significant bits: 14 with
//   retained_bits 13, DeepSeek-V3's "about 14 bits" (arXiv 2412.19437, sec. 3.3), which the record pins
//   down: a product 2^-13 of the anchor survives, one 2^-14 below it vanishes.
// - Every `promotion_interval` products (128: cuBLASLt with fast accumulation off, and DeepSeek-V3's N_C)
//   the running sum is added into a plain f32 total (round to nearest even) and restarts from zero; 0 never
//   promotes (cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM, torch._scaled_mm's use_fast_accum=True).
//
// A product that is inf or nan makes the output the plain f32 sum (inf or nan, as the hardware's). The
// scales and bias are applied after, in the same epilogue as the f32 model (ops/fp8/fp8_math.h); that the
// hardware's epilogue rounds the same way is not yet checked (the record's scaled cases have bf16 outputs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "framework/dtype.h"

namespace mantissa {

enum class Fp8Accumulation : uint8_t { kF32, kTensorCore };

struct Fp8Accumulator {
  Fp8Accumulation kind = Fp8Accumulation::kF32;
  int group = 32;                // products aligned together (one MMA K step)
  int retained_bits = 13;        // bits kept below the anchor, and below the sum's leading bit
  int promotion_interval = 128;  // products between promotions into an f32 total; 0: never

  // Full f32 sums (the CPU's default): more precise than any FP8 tensor core.
  static Fp8Accumulator f32() { return {}; }
  // Hopper's FP8 tensor core through cuBLASLt: promotion every 128 products, or never with fast accumulation.
  static Fp8Accumulator hopper(bool fast_accumulation = false) {
    return {.kind = Fp8Accumulation::kTensorCore, .promotion_interval = fast_accumulation ? 0 : 128};
  }
  // "f32", "hopper" or "hopper-fast" for the two presets; otherwise the parameters in words.
  std::string name() const;
  bool operator==(const Fp8Accumulator&) const = default;
};

// "f32", "hopper" or "hopper-fast" (what --fp8_accumulator takes); nullopt for anything else.
std::optional<Fp8Accumulator> find_fp8_accumulator(std::string_view text);
// The same, throwing on anything else, naming the value and the three that exist.
Fp8Accumulator parse_fp8_accumulator(std::string_view text);

// The model the CPU's scaled_mm uses (process-wide, f32 until set; CUDA's scaled_mm runs the real tensor core
// and ignores it). Throws on a model it cannot compute (a group or promotion interval below 1 where needed,
// retained_bits outside 1..24, a promotion interval that is not a multiple of the group).
void set_cpu_fp8_accumulator(const Fp8Accumulator& model);
Fp8Accumulator cpu_fp8_accumulator();

// Sets the CPU's model for a scope and puts the previous one back.
class Fp8AccumulatorScope {
 public:
  explicit Fp8AccumulatorScope(const Fp8Accumulator& model) : previous_(cpu_fp8_accumulator()) {
    set_cpu_fp8_accumulator(model);
  }
  ~Fp8AccumulatorScope() { set_cpu_fp8_accumulator(previous_); }
  Fp8AccumulatorScope(const Fp8AccumulatorScope&) = delete;
  Fp8AccumulatorScope& operator=(const Fp8AccumulatorScope&) = delete;

 private:
  Fp8Accumulator previous_;
};

namespace cpu {

// One output under a tensor-core model: sum_l a[l * a_stride] * b[l * b_stride] for l < k, a and b FP8 bytes
// of the formats a_fp8 and b_fp8 (kF8E4M3 or kF8E5M2), unscaled.
float tensor_core_dot(const uint8_t* a, int64_t a_stride, DType a_fp8, const uint8_t* b, int64_t b_stride, DType b_fp8,
                      int64_t k, const Fp8Accumulator& model);

// C [m, n] (dense, f32) = A [m, k] B [k, n] under a tensor-core model, element (i, l) of A at
// a[i * a_row + l * a_col] and (l, j) of B at b[l * b_row + j * b_col]: each operand decoded once, then the model
// in f32 vectors, 32 outputs of a row at a time (exact where a group's sum fits an f32's 24 bits, as Hopper's does:
// tensor_core_dot's bits; about 3x the f32 GEMM's cost in training, 6x faster than a dot product per output),
// else one integer dot product per output. Parallel over rows.
void tensor_core_gemm(const uint8_t* a, int64_t a_row, int64_t a_col, DType a_fp8, const uint8_t* b, int64_t b_row,
                      int64_t b_col, DType b_fp8, int64_t m, int64_t n, int64_t k, const Fp8Accumulator& model,
                      float* c);

}  // namespace cpu
}  // namespace mantissa
