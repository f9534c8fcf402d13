// Host-side planning of the scaled FP8 matmul on CUDA (ops/fp8/fp8_plan.h): built in every configuration,
// tested on the CPU.
#include "ops/fp8/fp8_plan.h"

#include "framework/error.h"
#include "ops/cuda/plan_hash.h"

namespace mantissa::gpu {
namespace {

constexpr int kMinSm = 89;         // FP8 tensor cores: Ada (8.9) and Hopper (9.0) onwards
constexpr int64_t kMultiple = 16;  // cuBLASLt's FP8 rule for dims, leading dims (bytes) and alignment

// The leading dim of x used as a K-contiguous [outer, K] matrix (element (o, k) at o * ld + k), or 0 when it
// is not one that cuBLASLt's FP8 GEMM can read in place: k must be unit-stride, the row stride at least K and
// a multiple of 16 bytes, the data 16-byte aligned.
int64_t k_contiguous_ld(int64_t k, int64_t k_stride, int64_t outer_stride, int align) {
  const bool unit = k_stride == 1 || k == 1;
  if (!unit || outer_stride < k || outer_stride % kMultiple != 0 || align % kMultiple != 0) return 0;
  return outer_stride;
}

// The bias types cuBLASLt's FP8 epilogue takes: the output's type for a 16-bit output, bf16 for an f32 one.
bool epilogue_takes(DType out, DType bias) { return out == DType::kF32 ? bias == DType::kBF16 : bias == out; }

ScaledMmPlan fallback(Fp8Fallback why, std::string reason) {
  ScaledMmPlan p;
  p.path = ScaledMmPath::kDecodeF32;
  p.fallback = why;
  p.reason = std::move(reason);
  return p;
}

}  // namespace

ScaledMmPlan plan_scaled_mm(const ScaledMmCase& c) {
  const int64_t m = c.a.rows, k = c.a.cols, n = c.b.cols;
  if (c.sm < kMinSm) {
    return fallback(Fp8Fallback::kArchitecture,
                    detail::cat("compute capability ", c.sm / 10, ".", c.sm % 10,
                                " has no FP8 tensor cores (cuBLASLt's FP8 GEMM needs 8.9 or later)"));
  }
  if (m <= 0 || n <= 0 || k <= 0 || m % kMultiple != 0 || n % kMultiple != 0 || k % kMultiple != 0) {
    return fallback(
        Fp8Fallback::kShape,
        detail::cat("M ", m, ", N ", n, ", K ", k, ": cuBLASLt's FP8 GEMM needs every dim a positive multiple of 16"));
  }
  if (c.a.dtype == DType::kF8E5M2 && c.b.dtype == DType::kF8E5M2) {
    return fallback(Fp8Fallback::kFormats, "E5M2 x E5M2: cuBLASLt has no FP8 kernel for two E5M2 operands");
  }
  ScaledMmPlan p;
  p.path = ScaledMmPath::kCublasLtFp8;
  // a [M, K]: K-contiguous when its rows are unit-stride.
  p.lda = k_contiguous_ld(k, c.a.stride1, c.a.stride0, c.a.align);
  p.copy_a = p.lda == 0;
  if (p.copy_a) p.lda = k;
  // b [K, N] read as b^T [N, K]: K-contiguous when its columns are unit-stride (b is a transposed view, as a
  // linear's weight in the forward).
  p.ldb = k_contiguous_ld(k, c.b.stride0, c.b.stride1, c.b.align);
  p.copy_b = p.ldb == 0;
  if (p.copy_b) p.ldb = k;
  p.d_dtype = c.out;
  if (c.has_bias) {
    if (epilogue_takes(c.out, c.bias) && c.bias_align % kMultiple == 0) {
      p.bias = BiasPath::kEpilogue;
    } else {
      p = without_bias_epilogue(p);
      p.bias = BiasPath::kSeparate;
    }
  }
  return p;
}

ScaledMmPlan without_bias_epilogue(ScaledMmPlan plan) {
  MT_ASSERT(plan.path == ScaledMmPath::kCublasLtFp8, "without_bias_epilogue: not an FP8 plan");
  if (plan.bias == BiasPath::kEpilogue) plan.bias = BiasPath::kSeparate;
  plan.d_dtype = DType::kF32;  // the separate epilogue adds the bias to the f32 product, then rounds once
  return plan;
}

std::string fallback_notice(int device, const ScaledMmPlan& plan) {
  return detail::cat("mantissa: scaled_mm on cuda:", device,
                     " runs the f32 fallback (FP8 operands decoded exactly, the f32 GEMM, the CPU's epilogue): ",
                     plan.reason, ". Said once per cause; the results are exact up to the summation order.");
}

size_t Fp8GemmKeyHash::operator()(const Fp8GemmKey& key) const {
  return static_cast<size_t>(
      hash_fields({key.device, static_cast<int64_t>(key.scale_a), static_cast<int64_t>(key.scale_b),
                   static_cast<int64_t>(key.a), static_cast<int64_t>(key.b), static_cast<int64_t>(key.d),
                   static_cast<int64_t>(key.e2m1), static_cast<int64_t>(key.bias), static_cast<int64_t>(key.bias_dtype),
                   key.m, key.n, key.k, key.lda, key.ldb, key.align_a, key.align_b, key.align_d, key.align_bias}));
}

std::string describe(const Fp8GemmKey& key) {
  const std::string a = key.e2m1 ? "packed e2m1" : std::string(dtype_name(key.a));
  const std::string b = key.e2m1 ? "packed e2m1" : std::string(dtype_name(key.b));
  return detail::cat(
      key.e2m1 ? "FP4" : "FP8", " GEMM out[", key.m, ", ", key.n, "] (", dtype_name(key.d), ") = a[", key.m, ", ",
      key.k, "] (", a, ", row stride ", key.lda, ") @ b[", key.k, ", ", key.n, "] (", b,
      ", read as b^T with row stride ", key.ldb, ")",
      key.bias == BiasPath::kEpilogue ? detail::cat(", bias epilogue ", dtype_name(key.bias_dtype)) : std::string(),
      "; aligned a ", key.align_a, " B, b ", key.align_b, " B, out ", key.align_d, " B",
      key.bias == BiasPath::kEpilogue ? detail::cat(", bias ", key.align_bias, " B") : std::string(),
      key.scale_a != Fp8ScaleMode::kTensor || key.scale_b != Fp8ScaleMode::kTensor
          ? detail::cat("; scale modes a ", static_cast<int>(key.scale_a), ", b ", static_cast<int>(key.scale_b))
          : std::string());
}

MicroScaledPlan plan_micro_scaled_mm(const ScaledMmCase& c, int64_t block_k, bool e2m1) {
  MicroScaledPlan p;
  const int64_t k = c.a.cols;
  if (c.sm < 100) {
    p.reason = detail::cat("compute capability ", c.sm / 10, ".", c.sm % 10,
                           " has no block-scaled tensor cores (MXFP8 and NVFP4 need 10.0, Blackwell)");
    return p;
  }
  if (e2m1 && block_k == 32) {
    p.reason = "MXFP4 (E2M1 with E8M0 scales): cuBLASLt has no such GEMM";
    return p;
  }
  if (block_k != (e2m1 ? 16 : 32)) {
    p.reason = detail::cat(block_k, "-wide blocks of ", e2m1 ? "E2M1" : "FP8",
                           " values: Blackwell's block scaling takes 16 (NVFP4) or 32 (MXFP8)");
    return p;
  }
  if (e2m1 && (c.a.dtype != DType::kF8E4M3 || c.b.dtype != DType::kF8E4M3)) {
    p.reason = "E2M1 values must be stored as E4M3 bytes";
    return p;
  }
  p.operands = plan_scaled_mm(c);
  if (p.operands.path != ScaledMmPath::kCublasLtFp8) {
    p.reason = p.operands.reason;
    return p;
  }
  if (k % 32 != 0) {
    p.reason = detail::cat("K ", k, ": Blackwell's block-scaled GEMM needs a multiple of 32");
    return p;
  }
  p.ok = true;
  p.mode = e2m1 ? Fp8ScaleMode::kVec16Ue4m3 : Fp8ScaleMode::kVec32Ue8m0;
  return p;
}

}  // namespace mantissa::gpu
