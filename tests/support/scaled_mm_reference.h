// scaled_mm's CPU contract (ops/fp8/fp8.h) written out for tests, from operands already decoded (any floating
// dtype holding FP8 values, so exact in bf16): the bf16 GEMM with an f32 accumulator, each operand handed to it
// in the layout it has (a transposed view as a transpose flag, neither dim unit-stride gathered row-major: so the
// very GEMM call scaled_mm makes), then acc * (sa * sb) + bias in f32 with one rounding (an fma), or
// acc * (sa * sb) without a bias, and one rounding to out_dtype. The GEMM itself is checked against a
// double-precision product in tests/ops/gemm_test.cc (GemmKernel).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa::testing {

// x as the GEMM receives it: dense bf16 in its stored order, the transpose flag and the row stride.
struct GemmOperand {
  Tensor stored;
  cpu::Trans trans = cpu::Trans::kNo;
  int64_t ld = 1;
};

inline GemmOperand gemm_operand(const Tensor& x) {
  const int64_t r = x.size(0), c = x.size(1);
  if (c <= 1 || x.stride(1) == 1) return {x.to(DType::kBF16).contiguous(), cpu::Trans::kNo, std::max<int64_t>(c, 1)};
  if (r <= 1 || x.stride(0) == 1)
    return {x.t().to(DType::kBF16).contiguous(), cpu::Trans::kYes, std::max<int64_t>(r, 1)};
  return {x.to(DType::kBF16).contiguous(), cpu::Trans::kNo, std::max<int64_t>(c, 1)};
}

inline Tensor scaled_mm_reference(const Tensor& a_decoded, const Tensor& b_decoded, float sa, float sb, DType out_dtype,
                                  const Tensor& bias = Tensor()) {
  const int64_t m = a_decoded.size(0), k = a_decoded.size(1), n = b_decoded.size(1);
  const GemmOperand a = gemm_operand(a_decoded), b = gemm_operand(b_decoded);
  std::vector<float> acc(static_cast<size_t>(m * n));
  cpu::gemm(cpu::GemmArgs<BFloat16, float>{.trans_a = a.trans,
                                           .trans_b = b.trans,
                                           .m = m,
                                           .n = n,
                                           .k = k,
                                           .a = a.stored.data<BFloat16>(),
                                           .lda = a.ld,
                                           .b = b.stored.data<BFloat16>(),
                                           .ldb = b.ld,
                                           .c = acc.data(),
                                           .ldc = n});
  const float s = sa * sb;
  const Tensor bias32 = bias.defined() ? bias.to(DType::kF32).contiguous() : Tensor();
  for (size_t i = 0; i < acc.size(); ++i) {
    acc[i] = bias.defined() ? std::fma(acc[i], s, bias32.data<float>()[static_cast<int64_t>(i) % n]) : acc[i] * s;
  }
  return from_vector<float>(acc, {m, n}).to(out_dtype);  // one rounding to out_dtype
}

}  // namespace mantissa::testing
