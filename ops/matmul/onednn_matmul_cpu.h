// oneDNN's matmul primitive: strided, batched, broadcast-batch C = alpha A @ B + beta C for f32 and
// bf16 (AMX or AVX512_BF16 dot products, fp32 accumulation, one rounding at the output). The bf16 GEMM
// runs on it; f32 takes dnnl_sgemm, which measured faster (gemm.cc). Primitives are cached by problem.
#pragma once

#include <array>
#include <cstdint>

namespace mantissa::cpu {

// The operands' and C's types: f32 throughout, bf16 throughout (C rounded once), or bf16 operands into an f32 C.
enum class MatmulType : uint8_t { kF32, kBF16, kBF16F32Out };

// One operand's geometry as oneDNN sees it: dims [batch, rows, cols] with element strides. batch 1
// with a larger output batch broadcasts the matrix.
struct MatmulOperand {
  int64_t batch = 1, rows = 0, cols = 0;
  std::array<int64_t, 3> strides{0, 0, 0};
};

struct MatmulProblem {
  MatmulType type = MatmulType::kF32;
  MatmulOperand a, b, c;  // a [batch_a, m, k], b [batch_b, k, n], c [batch, m, n]
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: C is only written
};

// Runs the problem; every pointer addresses element [0, 0, 0] of its operand.
void onednn_matmul(const MatmulProblem& p, const void* a, const void* b, void* c);

}  // namespace mantissa::cpu
