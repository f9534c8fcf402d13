// Host-side planning of the scaled FP8 matmul on CUDA (ops/fp8/fp8.h's scaled_mm), with no CUDA headers so that the
// CPU tests run it: whether cuBLASLt's FP8 GEMM can take a case or the decode fallback must, which operands need
// a K-contiguous copy first, and where the bias goes.
//
// cuBLASLt's FP8 GEMM (cublasLtMatmul with CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 operands) takes only:
//   - a GPU of compute capability 8.9 or later (Ada, Hopper: FP8 tensor cores);
//   - the "TN" layout: in cuBLAS's column-major terms A transposed and B not, which for the row-major product
//     out[M, N] = a[M, K] @ b[K, N] (cuBLAS computes out^T = b^T a^T, ops/matmul/gemm_plan.h) means both
//     operands K-contiguous: a as a row-major [M, K], b as a row-major b^T [N, K];
//   - 16-byte aligned operands with leading dims that are multiples of 16 bytes, and M, N, K multiples of 16
//     (what Transformer Engine requires of an FP8 GEMM too);
//   - not both operands E5M2 (ops/fp8/fp8.h refuses that case before it gets here);
//   - a bias, in the epilogue, of the output's type for a 16-bit output and bf16 for an f32 output.
// Transposing an FP8 operand costs a 1-byte-per-element copy, so an operand that is not K-contiguous (the
// weight in dgrad = g @ w, both operands of wgrad = g^T @ x) is copied. Any other case runs the fallback:
// the operands decoded to f32 (exact), the f32 GEMM and the CPU's epilogue kernel, announced once on stderr.
#pragma once

#include <cstdint>
#include <string>

#include "framework/dtype.h"

namespace mantissa::gpu {

// One FP8 operand of scaled_mm as given: [rows, cols] with element strides, and the byte alignment of its data.
struct Fp8Operand {
  DType dtype = DType::kF8E4M3;
  int64_t rows = 0, cols = 0, stride0 = 0, stride1 = 0;
  int align = 256;
};

// Everything the plan depends on. sm is the compute capability as 10 * major + minor (90 for an H100).
struct ScaledMmCase {
  Fp8Operand a;  // [M, K]
  Fp8Operand b;  // [K, N]
  DType out = DType::kF32;
  bool has_bias = false;
  DType bias = DType::kF32;
  int bias_align = 256;
  int sm = 90;
};

enum class ScaledMmPath : uint8_t { kCublasLtFp8, kDecodeF32 };
// Why a case takes the fallback (each is announced once per process).
enum class Fp8Fallback : uint8_t { kNone, kArchitecture, kShape, kFormats, kDeclined };
// kEpilogue: cuBLASLt adds the bias (CUBLASLT_EPILOGUE_BIAS); kSeparate: cuBLASLt writes f32 and the epilogue
// kernel adds the bias in f32 and rounds once to the output dtype.
enum class BiasPath : uint8_t { kNone, kEpilogue, kSeparate };

struct ScaledMmPlan {
  ScaledMmPath path = ScaledMmPath::kDecodeF32;
  Fp8Fallback fallback = Fp8Fallback::kNone;
  std::string reason;  // the fallback's cause in words ("" on the FP8 path)
  // The FP8 path's operands: a as a K-contiguous [M, K] with row stride lda, b as a K-contiguous b^T [N, K] with
  // row stride ldb; copy_* says the operand must first be copied densely (then its ld is K).
  bool copy_a = false, copy_b = false;
  int64_t lda = 0, ldb = 0;
  BiasPath bias = BiasPath::kNone;
  DType d_dtype = DType::kF32;  // what cuBLASLt writes: the output dtype, or f32 for a separate bias
};

ScaledMmPlan plan_scaled_mm(const ScaledMmCase& c);

// The same FP8 plan with the bias moved out of cuBLASLt's epilogue (kEpilogue -> kSeparate, D in f32): the
// retry when cuBLASLt offers no algorithm with the bias epilogue.
ScaledMmPlan without_bias_epilogue(ScaledMmPlan plan);

// The first line a fallback prints: "mantissa: scaled_mm on cuda:<device> runs the f32 fallback ... : <reason>".
std::string fallback_notice(int device, const ScaledMmPlan& plan);

// What cuBLASLt's FP8 descriptors and the heuristic's choice depend on (the pointers only through their
// alignment, which goes into the heuristic's preferences: it assumes 256 bytes otherwise): equal keys may share
// one cached plan. a, b, d and bias are our operands (cuBLAS's B, A, D and bias).
// How cuBLASLt reads an operand's dequantization factors (cublasLtMatmulMatrixScale_t, CUDA 12.9+): one f32 per
// tensor; a vector over the rows of a / the columns of b (OUTER_VEC_32F); one f32 per 128 of K per row or column
// (VEC128_32F); one per 128x128 block (BLK128x128_32F). The last three are Hopper's (sm_90) only, per NVIDIA's
// cuBLAS documentation; with them the output must be f32, bf16 or f16 and fast accumulation off. Blackwell's
// (compute capability 10.0 and later) block scales are bytes in a tiled layout (ops/fp8/block_math.h's
// block_scale_offset): one E8M0 per 32 of K (VEC32_UE8M0: MXFP8) or one E4M3 per 16 of K (VEC16_UE4M3: NVFP4,
// with E2M1 operands packed two to a byte).
enum class Fp8ScaleMode : uint8_t { kTensor, kOuterVector, kVec128, kBlock128x128, kVec32Ue8m0, kVec16Ue4m3 };

struct Fp8GemmKey {
  int device = 0;
  Fp8ScaleMode scale_a = Fp8ScaleMode::kTensor, scale_b = Fp8ScaleMode::kTensor;  // our a's and our b's
  DType a = DType::kF8E4M3, b = DType::kF8E4M3, d = DType::kF32;
  bool e2m1 = false;                // a and b hold packed E2M1 pairs (CUDA_R_4F_E2M1; lda and ldb count elements)
  BiasPath bias = BiasPath::kNone;  // kEpilogue or kNone: a separate bias is not cuBLASLt's business
  DType bias_dtype = DType::kF32;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0;
  int align_a = 256, align_b = 256, align_d = 256, align_bias = 256;
  friend bool operator==(const Fp8GemmKey&, const Fp8GemmKey&) = default;
};

struct Fp8GemmKeyHash {
  size_t operator()(const Fp8GemmKey& key) const;
};

// The case in words for error messages.
std::string describe(const Fp8GemmKey& key);

// Whether block_scaled_mm (ops/fp8/blocks.h) can take Blackwell's block-scaled GEMM: MXFP8 (E4M3 or E5M2
// operands, 32-wide blocks of E8M0 scales) or NVFP4 (E2M1 operands, 16-wide blocks of E4M3 scales), through
// cuBLASLt on compute capability 10.0 or later. `e2m1` says the operands' bytes hold E2M1 values; `block_k`
// is the blocks' width along K. Both operands are read K-contiguous (an FP4 operand is always packed into a
// fresh buffer; an FP8 one copied as plan_scaled_mm says), so the shape rules are plan_scaled_mm's and K a
// multiple of 32 (whole blocks; a packed FP4 row of 16 bytes). MXFP4 (E2M1 with E8M0 scales) is refused: no
// cuBLASLt release offers it (PyTorch runs it through FBGEMM's CUTLASS kernel). A refusal's reason is in
// words, and the f32 path runs instead.
struct MicroScaledPlan {
  bool ok = false;
  std::string reason;  // why not ("" when ok)
  Fp8ScaleMode mode = Fp8ScaleMode::kTensor;
  ScaledMmPlan operands;  // the FP8 plan of the operands (copies, leading dims): MXFP8 only
};
MicroScaledPlan plan_micro_scaled_mm(const ScaledMmCase& c, int64_t block_k, bool e2m1);

}  // namespace mantissa::gpu
