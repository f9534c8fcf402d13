// GEMM kernels over raw pointers (row-major, strided-batched).
//   f32:  oneDNN's dnnl_sgemm (its AVX-512 JIT kernels). OpenBLAS picks its kernels from
//         OPENBLAS_CORETYPE when the library loads, and this environment exports Haswell, which halves
//         its sgemm; oneDNN reads the CPU itself. dnnl_sgemm measured faster than oneDNN's f32 matmul
//         primitive and than OpenBLAS at its best (bench/RESULTS.md).
//   f64:  OpenBLAS dgemm, single-threaded per call, with parallel_for over blocks of C's rows.
//   bf16: on a CPU with AVX512_BF16 or AMX, oneDNN matmul with bf16 operands: bf16 dot products
//         accumulating in fp32, one rounding to bf16 at the output (alpha and beta applied in fp32 before
//         it), or none into an f32 C. Without them, widened to f32 as f16 is: oneDNN's emulated bf16 path
//         runs at a third of its sgemm. MANTISSA_BF16_GEMM=native|widened overrides the choice.
//   f16:  this oneDNN has no f16 matmul, so A and B are widened to f32 (exact), multiplied by the f32
//         GEMM and rounded once to f16: the tensor-core contract, bit for bit.
// Threads: every dtype runs on the one OpenMP pool that parallel_for uses (oneDNN is built on OpenMP;
// nested calls run serially). OpenBLAS's own pthread pool is set to one thread, so the two pools can
// never oversubscribe the cores, and each f64 element's sum order is independent of the thread count.
#include "ops/matmul/gemm_cpu.h"

#include <algorithm>
#include <cblas.h>
#include <cstdlib>
#include <mutex>
#include <oneapi/dnnl/dnnl.h>
#include <string_view>

#include "framework/allocator.h"
#include "framework/convert.h"
#include "framework/dtype.h"
#include "framework/error.h"
#include "framework/parallel.h"
#include "ops/cpu/compute_buffer.h"
#include "ops/matmul/onednn_matmul_cpu.h"

namespace mantissa::cpu {
namespace {

void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// A matrix as stored: rows x cols with row stride ld (op(A) = A^T when transposed).
struct Stored {
  int64_t rows, cols;
};
Stored stored(Trans t, int64_t rows, int64_t cols) {
  return t == Trans::kYes ? Stored{cols, rows} : Stored{rows, cols};
}

// op(X) [rows, cols] of a batched operand as oneDNN strides; a zero batch stride broadcasts.
MatmulOperand operand(Trans t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t batch_stride) {
  MatmulOperand o;
  o.batch = batch_stride == 0 ? 1 : batch;
  o.rows = rows;
  o.cols = cols;
  const int64_t footprint = (t == Trans::kYes ? cols : rows) * ld;
  o.strides = {batch_stride == 0 ? std::max<int64_t>(footprint, 1) : batch_stride, t == Trans::kYes ? 1 : ld,
               t == Trans::kYes ? ld : 1};
  return o;
}

template <typename T, typename Out>
MatmulProblem problem(const BatchedGemmArgs<T, Out>& bg, MatmulType type) {
  const GemmArgs<T, Out>& g = bg.gemm;
  MatmulProblem p;
  p.type = type;
  p.a = operand(g.trans_a, g.m, g.k, g.lda, bg.batch, bg.stride_a);
  p.b = operand(g.trans_b, g.k, g.n, g.ldb, bg.batch, bg.stride_b);
  p.c = operand(Trans::kNo, g.m, g.n, g.ldc, bg.batch, bg.stride_c);
  p.c.batch = bg.batch;
  p.alpha = static_cast<float>(g.alpha);
  p.beta = static_cast<float>(g.beta);
  return p;
}

// With k == 0 the product is empty: C = beta * C (and beta == 0 writes zeros, never reading C).
template <typename T, typename Out>
void scale_c(const BatchedGemmArgs<T, Out>& bg) {
  const GemmArgs<T, Out>& g = bg.gemm;
  for (int64_t b = 0; b < bg.batch; ++b) {
    for (int64_t i = 0; i < g.m; ++i) {
      Out* row = g.c + b * bg.stride_c + i * g.ldc;
      using C = compute_t<Out>;
      for (int64_t j = 0; j < g.n; ++j) {
        row[j] = g.beta == 0.0 ? Out(C(0)) : static_cast<Out>(static_cast<C>(g.beta) * static_cast<C>(row[j]));
      }
    }
  }
}

template <typename T, typename Out>
bool trivial(const BatchedGemmArgs<T, Out>& bg) {
  if (bg.batch == 0 || bg.gemm.m == 0 || bg.gemm.n == 0) return true;
  if (bg.gemm.k == 0) {
    scale_c(bg);
    return true;
  }
  return false;
}

using Scratch = CachedBuffer<float>;

// Copies `count` matrices (rows x cols, row stride ld, matrix stride `stride`) to or from a dense
// f32 buffer, converting. Parallel over all rows.
template <typename Src, typename Dst>
void convert_matrices(const Src* src, int64_t src_ld, int64_t src_stride, Dst* dst, int64_t dst_ld, int64_t dst_stride,
                      int64_t count, int64_t rows, int64_t cols) {
  parallel_for(count * rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / rows, i = r % rows;
      convert(src + b * src_stride + i * src_ld, dst + b * dst_stride + i * dst_ld, cols);
    }
  });
}

// 16-bit operands widened to f32 (exact), the f32 GEMM, one rounding into C (none into an f32 C, which
// the GEMM writes in place): the tensor-core contract, bit for bit, on any CPU with the f32 GEMM.
template <typename T, typename Out>
void gemm_widened(const BatchedGemmArgs<T, Out>& bg) {
  const GemmArgs<T, Out>& g = bg.gemm;
  const Stored sa = stored(g.trans_a, g.m, g.k), sb = stored(g.trans_b, g.k, g.n);
  const int64_t na = bg.stride_a == 0 ? 1 : bg.batch, nb = bg.stride_b == 0 ? 1 : bg.batch;
  constexpr bool kF32Out = std::is_same_v<Out, float>;
  Scratch a(na * sa.rows * sa.cols), b(nb * sb.rows * sb.cols), c(kF32Out ? 0 : bg.batch * g.m * g.n);
  convert_matrices(g.a, g.lda, bg.stride_a, a.get(), sa.cols, sa.rows * sa.cols, na, sa.rows, sa.cols);
  convert_matrices(g.b, g.ldb, bg.stride_b, b.get(), sb.cols, sb.rows * sb.cols, nb, sb.rows, sb.cols);
  float* c_f32 = nullptr;
  int64_t ldc = g.n, stride_c = g.m * g.n;
  if constexpr (kF32Out) {
    c_f32 = g.c;
    ldc = g.ldc;
    stride_c = bg.stride_c;
  } else {
    c_f32 = c.get();
    if (g.beta != 0.0) convert_matrices(g.c, g.ldc, bg.stride_c, c_f32, g.n, g.m * g.n, bg.batch, g.m, g.n);
  }
  gemm_batched(BatchedGemmArgs<float>{.gemm = {.trans_a = g.trans_a,
                                               .trans_b = g.trans_b,
                                               .m = g.m,
                                               .n = g.n,
                                               .k = g.k,
                                               .a = a.get(),
                                               .lda = sa.cols,
                                               .b = b.get(),
                                               .ldb = sb.cols,
                                               .c = c_f32,
                                               .ldc = ldc,
                                               .alpha = g.alpha,
                                               .beta = g.beta},
                                      .batch = bg.batch,
                                      .stride_a = bg.stride_a == 0 ? 0 : sa.rows * sa.cols,
                                      .stride_b = bg.stride_b == 0 ? 0 : sb.rows * sb.cols,
                                      .stride_c = stride_c});
  if constexpr (!kF32Out) {
    convert_matrices(static_cast<const float*>(c_f32), g.n, g.m * g.n, g.c, g.ldc, bg.stride_c, bg.batch, g.m, g.n);
  }
}

Bf16GemmPath path_from_environment() {
  if (const char* e = std::getenv("MANTISSA_BF16_GEMM")) {
    const std::string_view v(e);
    if (v == "native") return Bf16GemmPath::kNative;
    if (v == "widened") return Bf16GemmPath::kWidened;
    MT_THROW("MANTISSA_BF16_GEMM must be 'native' or 'widened', got '", v, "'");
  }
  // oneDNN's bf16 kernels need AVX512_BF16 (or AMX) dot products; without them it emulates the bf16
  // products and ran at 49 GFLOP/s against its f32 GEMM's 165 on the 2-core Xeon (bench/RESULTS.md).
  return dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_bf16 &&
                 dnnl_get_effective_cpu_isa() != dnnl_cpu_isa_avx2_vnni
             ? Bf16GemmPath::kNative
             : Bf16GemmPath::kWidened;
}

template <typename T, typename Out>
BatchedGemmArgs<T, Out> single(const GemmArgs<T, Out>& g) {
  return {.gemm = g, .batch = 1, .stride_a = 0, .stride_b = 0, .stride_c = g.m * g.ldc};
}

}  // namespace

void gemm_batched(const BatchedGemmArgs<float>& bg) {
  if (trivial(bg)) return;
  const GemmArgs<float>& g = bg.gemm;
  const auto trans = [](Trans t) { return t == Trans::kYes ? 'T' : 'N'; };
  auto one = [&](int64_t z) {
    const dnnl_status_t status = dnnl_sgemm(
        trans(g.trans_a), trans(g.trans_b), g.m, g.n, g.k, static_cast<float>(g.alpha), g.a + z * bg.stride_a, g.lda,
        g.b + z * bg.stride_b, g.ldb, static_cast<float>(g.beta), g.c + z * bg.stride_c, g.ldc);
    MT_ASSERT(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status));
  };
  // Small matrices: one thread per matrix (the nested sgemm runs serially). Large: each call is threaded.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 21) / std::max<int64_t>(g.m * g.n * g.k, 1));
  parallel_for(bg.batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t z = begin; z < end; ++z) one(z);
  });
}

void gemm_batched(const BatchedGemmArgs<double>& bg) {
  if (trivial(bg)) return;
  single_threaded_blas();
  const GemmArgs<double>& g = bg.gemm;
  const auto trans = [](Trans t) { return t == Trans::kYes ? CblasTrans : CblasNoTrans; };
  // Rows of C (over all batches) in blocks; row i of op(A) starts at i * lda, or at i when transposed.
  const int64_t a_row_step = g.trans_a == Trans::kYes ? 1 : g.lda;
  const int64_t grain = std::max<int64_t>(16, (int64_t{1} << 20) / std::max<int64_t>(g.n * g.k, 1));
  parallel_for(bg.batch * g.m, grain, [&](int64_t begin, int64_t end) {
    while (begin < end) {
      const int64_t z = begin / g.m, i0 = begin % g.m, rows = std::min(end - begin, g.m - i0);
      cblas_dgemm(CblasRowMajor, trans(g.trans_a), trans(g.trans_b), static_cast<int>(rows), static_cast<int>(g.n),
                  static_cast<int>(g.k), g.alpha, g.a + z * bg.stride_a + i0 * a_row_step, static_cast<int>(g.lda),
                  g.b + z * bg.stride_b, static_cast<int>(g.ldb), g.beta, g.c + z * bg.stride_c + i0 * g.ldc,
                  static_cast<int>(g.ldc));
      begin += rows;
    }
  });
}

void gemm_batched(const BatchedGemmArgs<Half>& bg) {
  if (trivial(bg)) return;
  gemm_widened(bg);
}

Bf16GemmPath bf16_gemm_path() {
  static const Bf16GemmPath path = path_from_environment();
  return path;
}

std::string_view bf16_gemm_path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::kNative ? "native (oneDNN bf16 matmul)" : "widened (to f32, oneDNN sgemm)";
}

namespace {

// oneDNN's native bf16 matmul with B always in its plain [k, n] layout. Debian's oneDNN 2.6.3 on a CPU with
// AMX and AVX512_BF16 (the Sapphire Rapids host of the first lent GPU, bench/gpu/2026-11-28) returned wrong
// products, every element, for a transposed B with a tight leading dimension (m 37, n 53, k 29, ldb = k),
// where the same shapes with B untransposed, and every padded layout, were right. So a transposed B is
// copied into [k, n] first: k * n element moves against the product's 2 m n k flops.
template <typename Out>
void native_bf16(const BatchedGemmArgs<BFloat16, Out>& bg, MatmulType type) {
  const GemmArgs<BFloat16, Out>& g = bg.gemm;
  if (g.trans_b == Trans::kNo) return onednn_matmul(problem(bg, type), g.a, g.b, g.c);
  const int64_t nb = bg.stride_b == 0 ? 1 : bg.batch, plain = g.k * g.n;
  CachedBuffer<BFloat16> b(nb * plain);
  BFloat16* dst = b.get();
  parallel_for(nb * g.k, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.n, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t z = r / g.k, l = r % g.k;
      const BFloat16* src = g.b + z * bg.stride_b + l;
      BFloat16* row = dst + z * plain + l * g.n;
      for (int64_t j = 0; j < g.n; ++j) row[j] = src[j * g.ldb];
    }
  });
  BatchedGemmArgs<BFloat16, Out> packed = bg;
  packed.gemm.trans_b = Trans::kNo;
  packed.gemm.b = dst;
  packed.gemm.ldb = g.n;
  packed.stride_b = bg.stride_b == 0 ? 0 : plain;
  onednn_matmul(problem(packed, type), packed.gemm.a, packed.gemm.b, packed.gemm.c);
}

}  // namespace

void gemm_batched(const BatchedGemmArgs<BFloat16>& bg) {
  if (trivial(bg)) return;
  if (bf16_gemm_path() == Bf16GemmPath::kWidened) return gemm_widened(bg);
  native_bf16(bg, MatmulType::kBF16);
}

void gemm_batched(const BatchedGemmArgs<BFloat16, float>& bg) {
  if (trivial(bg)) return;
  if (bf16_gemm_path() == Bf16GemmPath::kWidened) return gemm_widened(bg);
  native_bf16(bg, MatmulType::kBF16F32Out);
}

void gemm(const GemmArgs<float>& g) { gemm_batched(single(g)); }
void gemm(const GemmArgs<double>& g) { gemm_batched(single(g)); }
void gemm(const GemmArgs<Half>& g) { gemm_batched(single(g)); }
void gemm(const GemmArgs<BFloat16>& g) { gemm_batched(single(g)); }
void gemm(const GemmArgs<BFloat16, float>& g) { gemm_batched(single(g)); }

}  // namespace mantissa::cpu
