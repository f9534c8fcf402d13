// What mantissa assumes of cuBLAS and cuBLASLt themselves, asked of the libraries directly (no mantissa
// code in between), so that a wrong answer on a GPU says whose it is. The first GPU run (an H200, cuBLAS
// 13.1, bench/gpu/2026-11-28) found bf16 GEMMs with a transposed B and tight odd leading dimensions
// (m 37, n 53, k 29) far from the CPU's; these cases, run in the second call there, showed cuBLASLt (with
// and without the launcher's reduction-scheme mask) and cublasGemmEx right, each against an f64 reference:
// the CPU reference was wrong (oneDNN's native bf16 matmul on that host's AMX CPU, ops/matmul/gemm_cpu.cc).
// Kept as the libraries' check for that layout. Skipped without a device.
#include <gtest/gtest.h>

#ifdef MANTISSA_WITH_CUDA
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/half.h"
#include "tests/support/cuda_skip.h"

namespace mantissa {
namespace {

enum class Path { kLtMasked, kLtPlain, kGemmEx };
const char* path_name(Path p) {
  return p == Path::kLtMasked ? "cuBLASLt, f32 split-K reductions only"
                              : (p == Path::kLtPlain ? "cuBLASLt, default preference" : "cublasGemmEx");
}

// C (m x n, column-major, ldc m) = A^T B with A stored k x m (lda k) and B k x n (ldb k), all 16-bit `T` and
// one element past a 256-byte boundary (2-byte aligned; aligned with a bias); returns how many outputs miss the f64
// reference by more than k + 1 f32 roundings of sum |a b| plus one rounding of the output. The bias of cuBLASLt's BIAS
// epilogue: none, in the output's type, or f32.
enum class Bias { kNone, kOutType, kF32 };

template <typename T>
int64_t misses(Path path, int64_t m, int64_t n, int64_t k, std::string* first, Bias bias_kind = Bias::kNone,
               bool sum_rounded_first = false) {
  constexpr cudaDataType dt = std::is_same_v<T, BFloat16> ? CUDA_R_16BF : CUDA_R_16F;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> a(static_cast<size_t>(k * m)), b(static_cast<size_t>(k * n)), c(static_cast<size_t>(m * n));
  for (T& v : a) v = T(dist(gen));
  for (T& v : b) v = T(dist(gen));
  // A bias of the sums' own size, so that some outputs cancel: one rounding of the sum before the bias is added
  // would show there as an error of many of the output's ulps.
  std::vector<float> bias(static_cast<size_t>(bias_kind == Bias::kNone ? 0 : m));
  for (float& v : bias) v = static_cast<float>(T(2.0f * dist(gen)));
  void* dbias = nullptr;
  if (!bias.empty()) {
    EXPECT_EQ(cudaMalloc(&dbias, bias.size() * sizeof(float)), cudaSuccess);
    if (bias_kind == Bias::kF32) {
      EXPECT_EQ(cudaMemcpy(dbias, bias.data(), bias.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      std::vector<T> bt(bias.begin(), bias.end());
      EXPECT_EQ(cudaMemcpy(dbias, bt.data(), bt.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  const int64_t o = bias_kind == Bias::kNone ? 1 : 0;  // the bias cases aligned, as mantissa's epilogue path
  T *da = nullptr, *db = nullptr, *dc = nullptr;
  EXPECT_EQ(cudaMalloc(&da, (a.size() + 1) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&db, (b.size() + 1) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dc, (c.size() + 1) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(da + o, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(db + o, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dc, 0xFF, (c.size() + 1) * sizeof(T)), cudaSuccess);  // nan: beta 0 must not read it
  const float alpha = 1.0f, beta = 0.0f;
  void* workspace = nullptr;
  constexpr size_t kWorkspace = size_t{32} << 20;
  EXPECT_EQ(cudaMalloc(&workspace, kWorkspace), cudaSuccess);
  bool no_algorithm = false;
  if (path == Path::kGemmEx) {
    cublasHandle_t h = nullptr;
    EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                           &alpha, da + o, dt, static_cast<int>(k), db + o, dt, static_cast<int>(k), &beta, dc + o, dt,
                           static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    cublasDestroy(h);
  } else {
    cublasLtHandle_t h = nullptr;
    EXPECT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDesc_t desc = nullptr;
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    if (bias_kind != Bias::kNone) {  // bias[i] for row i of the column-major C: mantissa's bias [n] of row-major out
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType bias_type = bias_kind == Bias::kF32 ? CUDA_R_32F : dt;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type));
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof(dbias));
    }
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatrixLayoutCreate(&la, dt, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k);
    cublasLtMatrixLayoutCreate(&lb, dt, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k);
    cublasLtMatrixLayoutCreate(&lc, dt, static_cast<uint64_t>(m), static_cast<uint64_t>(n), m);
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t ws = kWorkspace;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    const uint32_t align = 2;
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
    }
    if (path == Path::kLtMasked) {
      const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    // No algorithm (CUBLAS_STATUS_NOT_SUPPORTED, 7: an f32 bias for a 16-bit output on the H200) is an answer too:
    // -1, for the caller to say so.
    if (cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &result, &count) != CUBLAS_STATUS_SUCCESS)
      count = 0;
    no_algorithm = count == 0;
    if (count > 0) {
      EXPECT_EQ(cublasLtMatmul(h, desc, &alpha, da + o, la, db + o, lb, &beta, dc + o, lc, dc + o, lc, &result.algo,
                               workspace, kWorkspace, nullptr),
                CUBLAS_STATUS_SUCCESS);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(c.data(), dc + o, c.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(workspace);
  if (dbias != nullptr) cudaFree(dbias);
  if (no_algorithm) {
    *first = "cuBLASLt has no algorithm for this case";
    return -1;
  }
  const double u_out = std::is_same_v<T, BFloat16> ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  int64_t bad = 0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double want = bias.empty() ? 0.0 : bias[static_cast<size_t>(i)], mag = std::abs(want);
      for (int64_t l = 0; l < k; ++l) {
        const double p = static_cast<double>(static_cast<float>(a[static_cast<size_t>(i * k + l)])) *
                         static_cast<double>(static_cast<float>(b[static_cast<size_t>(j * k + l)]));
        want += p;
        mag += std::abs(p);
      }
      const double got = static_cast<double>(static_cast<float>(c[static_cast<size_t>(j * m + i)]));
      // sum_rounded_first: allow one more rounding, of the sum before the bias is added.
      const double sum = want - (bias.empty() ? 0.0 : bias[static_cast<size_t>(i)]);
      const double bound = (static_cast<double>(k) + 1) * std::ldexp(1.0, -24) * mag + u_out * std::abs(want) +
                           (sum_rounded_first ? u_out * std::abs(sum) : 0.0);
      if (!(std::abs(got - want) <= bound) && bad++ == 0) {
        *first = "C(" + std::to_string(i) + ", " + std::to_string(j) + ") = " + std::to_string(got) + ", want " +
                 std::to_string(want);
      }
    }
  }
  return bad;
}

template <typename T>
void expect_every_path_right(const char* type) {
  for (Path path : {Path::kLtMasked, Path::kLtPlain, Path::kGemmEx}) {
    std::string first;
    const int64_t bad = misses<T>(path, 53, 37, 29, &first);
    EXPECT_EQ(bad, 0) << type << " through " << path_name(path) << ": " << bad << " of " << 53 * 37
                      << " outputs wrong, the first " << first;
  }
}

TEST(CudaCublasConformance, TransposedTwoByteAlignedBf16) {
  MT_SKIP_WITHOUT_CUDA();
  expect_every_path_right<BFloat16>("bf16");
}

TEST(CudaCublasConformance, TransposedTwoByteAlignedF16) {
  MT_SKIP_WITHOUT_CUDA();
  expect_every_path_right<Half>("f16");
}

// The second GPU run (bench/gpu/2026-11-28-run2) found mantissa's bf16 GEMM through cuBLASLt's bias epilogue many
// ulps off where the bias cancels the sum, every such output a multiple of the bias's ulp: as if the sum were
// rounded to bf16 before the bias is added (f16 was right). Asked here directly, with the bias in the output type
// and in f32: each output must be within one rounding more than the exact sum's (the sum rounded first), and how
// many need that extra rounding is printed. Run 3 (H200, cuBLAS 13.1): 246 of 1320 bf16 outputs needed it, none
// was beyond it, and cuBLASLt has no algorithm for an f32 bias with a bf16 or f16 output (which this test then
// reports and does not count as a failure). f16 must be right with its own bias type.
template <typename T>
void expect_bias_epilogue(const char* type) {
  constexpr bool kBf16 = std::is_same_v<T, BFloat16>;
  for (Bias bias : {Bias::kOutType, Bias::kF32}) {
    const char* bias_type = bias == Bias::kF32 ? "f32" : type;
    std::string first, first_loose;
    const int64_t strict = misses<T>(Path::kLtPlain, 40, 33, 19, &first, bias);
    if (strict < 0 && bias == Bias::kF32) {  // run 3 (H200, cuBLAS 13.1): none for bf16 or f16 outputs
      std::printf("  %s output, f32 bias: cuBLASLt has no algorithm\n", type);
      continue;
    }
    const int64_t loose = misses<T>(Path::kLtPlain, 40, 33, 19, &first_loose, bias, true);
    std::printf("  %s output, %s bias: %lld of %d outputs beyond one rounding of the exact sum%s%s\n", type, bias_type,
                static_cast<long long>(strict), 40 * 33, strict > 0 ? ", the first " : "", first.c_str());
    EXPECT_EQ(loose, 0) << type << " with a " << bias_type << " bias: " << loose << " of " << 40 * 33
                        << " outputs beyond even two roundings, the first " << first_loose;
    if (!kBf16 && bias == Bias::kOutType) {
      EXPECT_EQ(strict, 0) << "the f16 bias epilogue mantissa's launcher uses";
    }
  }
}

TEST(CudaCublasConformance, BiasEpilogueBf16) {
  MT_SKIP_WITHOUT_CUDA();
  expect_bias_epilogue<BFloat16>("bf16");
}

TEST(CudaCublasConformance, BiasEpilogueF16) {
  MT_SKIP_WITHOUT_CUDA();
  expect_bias_epilogue<Half>("f16");
}

}  // namespace
}  // namespace mantissa
#endif  // MANTISSA_WITH_CUDA
