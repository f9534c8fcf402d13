// GEMM kernels. f32/f64: OpenBLAS. f16/bf16 (reference path): widen A and B to f32, sgemm, then
// combine with beta and round once to 16 bits. Widening is exact, so this meets the contract.
#include "ops/cpu/gemm.h"

#include <cblas.h>

#include <vector>

#include "framework/convert.h"

namespace mantissa::cpu {
namespace {

CBLAS_TRANSPOSE blas_trans(Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; }

// Copies a rows x cols matrix with row stride ld into a dense f32 buffer.
template <typename T>
std::vector<float> widen(const T* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) convert(src + r * ld, out.data() + r * cols, cols);
  return out;
}

template <typename T>
void gemm_16bit(const GemmArgs<T>& g) {
  if (g.m == 0 || g.n == 0) return;
  const int64_t a_rows = g.trans_a == Trans::kYes ? g.k : g.m, a_cols = g.trans_a == Trans::kYes ? g.m : g.k;
  const int64_t b_rows = g.trans_b == Trans::kYes ? g.n : g.k, b_cols = g.trans_b == Trans::kYes ? g.k : g.n;
  const std::vector<float> a = widen(g.a, a_rows, a_cols, g.lda);
  const std::vector<float> b = widen(g.b, b_rows, b_cols, g.ldb);
  std::vector<float> c(static_cast<size_t>(g.m * g.n));
  gemm(GemmArgs<float>{.trans_a = g.trans_a, .trans_b = g.trans_b, .m = g.m, .n = g.n, .k = g.k,
                       .a = a.data(), .lda = a_cols, .b = b.data(), .ldb = b_cols, .c = c.data(), .ldc = g.n,
                       .alpha = g.alpha, .beta = 0.0f});
  for (int64_t i = 0; i < g.m; ++i) {
    T* crow = g.c + i * g.ldc;
    for (int64_t j = 0; j < g.n; ++j) {
      float v = c[static_cast<size_t>(i * g.n + j)];
      if (g.beta != 0.0f) v += g.beta * static_cast<float>(crow[j]);
      crow[j] = T(v);
    }
  }
}

}  // namespace

void gemm(const GemmArgs<float>& g) {
  if (g.m == 0 || g.n == 0) return;
  cblas_sgemm(CblasRowMajor, blas_trans(g.trans_a), blas_trans(g.trans_b), static_cast<int>(g.m),
              static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, g.a, static_cast<int>(g.lda), g.b,
              static_cast<int>(g.ldb), g.beta, g.c, static_cast<int>(g.ldc));
}

void gemm(const GemmArgs<double>& g) {
  if (g.m == 0 || g.n == 0) return;
  cblas_dgemm(CblasRowMajor, blas_trans(g.trans_a), blas_trans(g.trans_b), static_cast<int>(g.m),
              static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, g.a, static_cast<int>(g.lda), g.b,
              static_cast<int>(g.ldb), g.beta, g.c, static_cast<int>(g.ldc));
}

void gemm(const GemmArgs<Half>& g) { gemm_16bit(g); }
void gemm(const GemmArgs<BFloat16>& g) { gemm_16bit(g); }

}  // namespace mantissa::cpu
