// Host-side planning of a GPU GEMM, with no CUDA headers so that the CPU tests run it: the mapping of
// mantissa's row-major GEMM onto cuBLAS's column-major one, pointer alignment for cuBLASLt's heuristic,
// and the key under which the cuBLASLt descriptors and the heuristic's algorithm are cached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "framework/dtype.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa::gpu {

// Row-major strided-batched GEMM as ops/matmul/gemm_cpu.h describes it (element counts, not bytes):
// C_i[m, n] = alpha * op(A_i)[m, k] @ op(B_i)[k, n] + beta * C_i, X_i = X + i * stride_x.
struct RowMajorGemm {
  cpu::Trans trans_a = cpu::Trans::kNo, trans_b = cpu::Trans::kNo;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// One operand as cuBLAS reads it: stored column-major as rows x cols with leading dim ld (>= rows),
// used transposed or not.
struct ColMajorOperand {
  cpu::Trans trans = cpu::Trans::kNo;
  int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
  friend bool operator==(const ColMajorOperand&, const ColMajorOperand&) = default;
};

// The same product in cuBLAS's terms. A row-major X[r, c] with row stride ld is the column-major
// X^T[c, r] with the same ld, so C = op(A) op(B) becomes C^T[n, m] = op(B)^T op(A)^T: cuBLAS's first
// operand is our B, its second our A, and its (m, n) are our (n, m). Nothing is copied.
struct ColMajorGemm {
  int64_t m = 0, n = 0, k = 0;  // cuBLAS's: D[m, n] = op(A)[m, k] op(B)[k, n]
  ColMajorOperand a;            // our B
  ColMajorOperand b;            // our A
  int64_t ldc = 0, stride_c = 0, batch = 1;
};

ColMajorGemm to_column_major(const RowMajorGemm& g);

// The largest power of two, at most 256, that divides the byte address and the byte batch stride
// (every matrix of the batch starts that aligned). cuBLASLt's heuristic assumes 256-byte aligned
// operands unless told otherwise, so the true alignment goes into its preferences.
int alignment_bytes(uintptr_t address, int64_t batch_stride_bytes);

enum class GemmMath : uint8_t { kExact, kTf32 };     // kTf32: f32 only (CUBLAS_COMPUTE_32F_FAST_TF32)
enum class GemmEpilogue : uint8_t { kNone, kBias };  // kBias: D += bias[n] per row (linear's bias)

// Everything the cuBLASLt descriptors and the heuristic's choice depend on (the pointers only through
// their alignment). Equal keys may share one cached plan.
struct GemmKey {
  int device = 0;
  DType dtype = DType::kF32;
  GemmMath math = GemmMath::kExact;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  ColMajorGemm gemm;
  int align_a = 256, align_b = 256, align_c = 256, align_bias = 256;  // of cuBLAS's a, b, c/d, bias
  friend bool operator==(const GemmKey& x, const GemmKey& y);
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& key) const;
};

// The case in words for error messages: dtype, math, cuBLAS's m, n, k, each operand's transpose, shape,
// leading dim, batch stride and alignment, the batch and the epilogue.
std::string describe(const GemmKey& key);

// cublasStatus_t's values that decide what a cuBLASLt status means, mirrored so that host code can reason
// about them (gemm.cu checks that they match cuBLAS's).
enum class CublasStatus : int { kSuccess = 0, kInvalidValue = 7, kNotSupported = 15 };

// What to do after a cuBLASLt call: use its result (or its algorithm); decline the case, so that the
// plain cuBLAS GEMM takes it and cuBLASLt is not asked again for the key; or raise the status as an error.
enum class LtVerdict : uint8_t { kUse, kDecline, kRaise };

// cublasLtMatmul's status: only NOT_SUPPORTED declines. Any other failure (INVALID_VALUE included: the
// heuristic's algorithm was picked for exactly these layouts and alignments, so it means an argument bug)
// is raised, not hidden behind the slower path.
LtVerdict lt_matmul_verdict(int status);

// cublasLtMatmulAlgoGetHeuristic's outcome: an algorithm (count > 0, its state SUCCESS, its workspace within
// `workspace_limit`) is used; no algorithm, or NOT_SUPPORTED, declines; any other status is raised.
LtVerdict lt_heuristic_verdict(int status, int count, int algo_state, size_t algo_workspace, size_t workspace_limit);

}  // namespace mantissa::gpu
