// The raw-pointer GEMM kernels (ops/matmul/gemm_cpu.h) in every dtype against a naive f64 loop: transpose
// flags, padded leading dims, strided and broadcast batches, alpha/beta, k = 0; the 16-bit contract
// (fp32 accumulation, one rounding) bit for bit; and independence from the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <omp.h>
#include <random>
#include <string>
#include <vector>

#include "framework/dtype.h"
#include "framework/parallel.h"
#include "ops/matmul/gemm_cpu.h"

namespace mantissa::cpu {
namespace {

// A batch of matrices stored rows x cols (row stride ld >= cols, matrix stride rows * ld).
template <typename T>
struct Stored {
  int64_t rows, cols, ld, count;
  std::vector<T> data;
  double at(int64_t b, int64_t i, int64_t j) const {
    return static_cast<double>(static_cast<compute_t<T>>(data[static_cast<size_t>(b * rows * ld + i * ld + j)]));
  }
};

template <typename T>
Stored<T> random_stored(int64_t rows, int64_t cols, int64_t ld, int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Stored<T> s{rows, cols, ld, count, std::vector<T>(static_cast<size_t>(rows * ld * count))};
  for (T& v : s.data) v = T(dist(gen));
  return s;
}

double unit_roundoff(DType d) {
  switch (d) {
    case DType::kF64: return std::ldexp(1.0, -53);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

// The operands' type and C's: each dtype with itself, and bf16 into an f32 C (the FP8 emulation's GEMM).
template <typename In, typename Out = In>
struct GemmTypes {
  using T = In;
  using C = Out;
};
template <typename P>
class GemmKernel : public ::testing::Test {};
using DTypes = ::testing::Types<GemmTypes<float>, GemmTypes<double>, GemmTypes<Half>, GemmTypes<BFloat16>,
                                GemmTypes<BFloat16, float>>;
TYPED_TEST_SUITE(GemmKernel, DTypes);

// C_b = 0.5 op(A_b) op(B) + 2 C_b for 3 batches (B broadcast with stride 0), all four transpose
// combinations, every leading dim padded; and C = op(A) op(B) with tight leading dims and beta 0 (nan in C,
// never read), the layout oneDNN and cuBLAS take other kernels for. Bound: one rounding of the output plus k u_acc
// sum|terms| (the standard dot-product bound; fp32 accumulation for all but f64). Padding must stay untouched. The
// larger size is split over threads (f64: row blocks that cross batch boundaries).
TYPED_TEST(GemmKernel, MatchesNaiveReference) {
  using T = typename TypeParam::T;
  using C = typename TypeParam::C;
  const DType dt = dtype_v<C>;
  const double u_acc = dt == DType::kF64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  struct Size {
    int64_t m, n, k;
  };
  for (const bool padded : {true, false}) {
    const int64_t batch = padded ? 3 : 1, pad = padded ? 3 : 0;
    const double alpha = padded ? 0.5 : 1.0, beta = padded ? 2.0 : 0.0;
    for (const Size size : {Size{13, 11, 17}, Size{301, 64, 70}, Size{37, 53, 29}}) {
      for (Trans ta : {Trans::kNo, Trans::kYes}) {
        for (Trans tb : {Trans::kNo, Trans::kYes}) {
          const int64_t m = size.m, n = size.n, k = size.k;
          SCOPED_TRACE(std::string(padded ? "padded" : "tight, beta 0") + " m " + std::to_string(m) + " trans " +
                       std::to_string(static_cast<int>(ta)) + std::to_string(static_cast<int>(tb)));
          const bool at = ta == Trans::kYes, bt = tb == Trans::kYes;
          const Stored<T> a = random_stored<T>(at ? k : m, at ? m : k, (at ? m : k) + pad, batch, 1);
          const Stored<T> b = random_stored<T>(bt ? n : k, bt ? k : n, (bt ? k : n) + pad, 1, 2);
          Stored<C> c = random_stored<C>(m, n, n + pad, batch, 3);
          if (!padded) std::fill(c.data.begin(), c.data.end(), C(std::numeric_limits<float>::quiet_NaN()));
          const Stored<C> c0 = c;
          const GemmArgs<T, C> g{.trans_a = ta,
                                 .trans_b = tb,
                                 .m = m,
                                 .n = n,
                                 .k = k,
                                 .a = a.data.data(),
                                 .lda = a.ld,
                                 .b = b.data.data(),
                                 .ldb = b.ld,
                                 .c = c.data.data(),
                                 .ldc = c.ld,
                                 .alpha = alpha,
                                 .beta = beta};
          gemm_batched(BatchedGemmArgs<T, C>{
              .gemm = g, .batch = batch, .stride_a = a.rows * a.ld, .stride_b = 0, .stride_c = c.rows * c.ld});
          for (int64_t z = 0; z < batch; ++z) {
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n + pad; ++j) {
                if (j >= n) {  // padding
                  ASSERT_EQ(c.at(z, i, j), c0.at(z, i, j));
                  continue;
                }
                double want = beta == 0.0 ? 0.0 : beta * c0.at(z, i, j), mag = std::abs(want);
                for (int64_t l = 0; l < k; ++l) {
                  const double p = alpha * (at ? a.at(z, l, i) : a.at(z, i, l)) * (bt ? b.at(0, j, l) : b.at(0, l, j));
                  want += p;
                  mag += std::abs(p);
                }
                ASSERT_LE(std::abs(c.at(z, i, j) - want), unit_roundoff(dt) * std::abs(want) + (k + 1) * u_acc * mag)
                    << "batch " << z << " (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
}

// k = 0: the product is empty, so C = beta * C; beta = 0 writes zeros without reading C (nan there).
TYPED_TEST(GemmKernel, EmptyInnerDimension) {
  using T = typename TypeParam::T;
  using C = typename TypeParam::C;
  std::vector<T> a(1), b(1);
  std::vector<C> c(6, C(3.0f));
  gemm(GemmArgs<T, C>{
      .m = 2, .n = 3, .k = 0, .a = a.data(), .lda = 1, .b = b.data(), .ldb = 3, .c = c.data(), .ldc = 3, .beta = 0.5});
  for (C v : c) EXPECT_EQ(static_cast<double>(static_cast<compute_t<C>>(v)), 1.5);
  std::vector<C> nan_c(6, C(std::numeric_limits<float>::quiet_NaN()));
  gemm(GemmArgs<T, C>{.m = 2,
                      .n = 3,
                      .k = 0,
                      .a = a.data(),
                      .lda = 1,
                      .b = b.data(),
                      .ldb = 3,
                      .c = nan_c.data(),
                      .ldc = 3,
                      .beta = 0.0});
  for (C v : nan_c) EXPECT_EQ(static_cast<double>(static_cast<compute_t<C>>(v)), 0.0);
}

// beta = 0 never reads C: nan there must not leak into the result.
TYPED_TEST(GemmKernel, ZeroBetaOverwritesNan) {
  using T = typename TypeParam::T;
  using C = typename TypeParam::C;
  std::vector<T> a(4, T(1.0f)), b(4, T(2.0f));
  std::vector<C> c(4, C(std::numeric_limits<float>::quiet_NaN()));
  gemm(GemmArgs<T, C>{
      .m = 2, .n = 2, .k = 2, .a = a.data(), .lda = 2, .b = b.data(), .ldb = 2, .c = c.data(), .ldc = 2});
  for (C v : c) EXPECT_EQ(static_cast<double>(static_cast<compute_t<C>>(v)), 4.0);
}

// Integer operands: fp32 accumulation is exact, so the output must be the exact sum rounded once to
// 16 bits, whatever the thread count (1 or 2 OpenMP threads, which oneDNN and the f16 path use). Two
// layouts: plain, and a padded A with B broadcast over 2 batches (oneDNN takes another kernel for it).
template <typename T>
void expect_exact_rounding(int threads) {
  const int64_t m = 48, n = 64, k = 200, lda = k + 5, batch = 2;
  std::mt19937 gen(4);
  std::uniform_int_distribution<int> dist(1, 9);  // sums near 5000: beyond 2048 (f16) and 256 (bf16)
  std::vector<T> a(static_cast<size_t>(batch * m * lda)), b(static_cast<size_t>(k * n));
  for (T& v : a) v = T(static_cast<float>(dist(gen)));
  for (T& v : b) v = T(static_cast<float>(dist(gen)));
  std::vector<T> plain(static_cast<size_t>(m * n)), batched(static_cast<size_t>(batch * m * n));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  gemm(GemmArgs<T>{
      .m = m, .n = n, .k = k, .a = a.data(), .lda = lda, .b = b.data(), .ldb = n, .c = plain.data(), .ldc = n});
  gemm_batched(BatchedGemmArgs<T>{
      .gemm =
          {.m = m, .n = n, .k = k, .a = a.data(), .lda = lda, .b = b.data(), .ldb = n, .c = batched.data(), .ldc = n},
      .batch = batch,
      .stride_a = m * lda,
      .stride_b = 0,
      .stride_c = m * n});
  omp_set_num_threads(saved);
  int64_t inexact = 0;  // how many outputs needed rounding (the test is void if none did)
  for (int64_t z = 0; z < batch; ++z) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float exact = 0;  // integers below 2^24: every partial sum is exact in float
        for (int64_t l = 0; l < k; ++l) {
          exact += static_cast<float>(a[static_cast<size_t>((z * m + i) * lda + l)]) *
                   static_cast<float>(b[static_cast<size_t>(l * n + j)]);
        }
        const uint16_t want = T(exact).bits;
        if (z == 0) {
          ASSERT_EQ(plain[static_cast<size_t>(i * n + j)].bits, want) << "(" << i << ", " << j << ")";
        }
        ASSERT_EQ(batched[static_cast<size_t>((z * m + i) * n + j)].bits, want) << z << " (" << i << ", " << j << ")";
        inexact += static_cast<float>(T(exact)) != exact;
      }
    }
  }
  EXPECT_GT(inexact, batch * m * n / 10) << "threads " << threads;
}

TEST(GemmKernel16, RoundsTheFp32SumOnceWithAnyThreadCount) {
  for (int threads : {1, 2}) {
    expect_exact_rounding<BFloat16>(threads);
    expect_exact_rounding<Half>(threads);
  }
}

// bf16 operands into an f32 C keep the f32 accumulator as it is: with integer operands every sum is exact in
// f32, so C must equal the exact sum, also where it has more significant bits than bf16 holds (which a rounding
// to bf16 on the way would lose), with 1 and 2 threads.
TEST(GemmKernel, Bf16IntoF32KeepsTheAccumulatorUnrounded) {
  const int64_t m = 37, n = 29, k = 300;
  std::mt19937 gen(9);
  std::uniform_int_distribution<int> dist(-16, 16);
  std::vector<BFloat16> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (BFloat16& v : a) v = BFloat16(static_cast<float>(dist(gen)));
  for (BFloat16& v : b) v = BFloat16(static_cast<float>(dist(gen)));
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<float> c(static_cast<size_t>(m * n));
    gemm(GemmArgs<BFloat16, float>{
        .m = m, .n = n, .k = k, .a = a.data(), .lda = k, .b = b.data(), .ldb = n, .c = c.data(), .ldc = n});
    int64_t beyond_bf16 = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t l = 0; l < k; ++l)
          want += static_cast<double>(static_cast<float>(a[static_cast<size_t>(i * k + l)])) *
                  static_cast<float>(b[static_cast<size_t>(l * n + j)]);
        ASSERT_EQ(c[static_cast<size_t>(i * n + j)], want) << "(" << i << ", " << j << ") threads " << threads;
        if (static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(want)))) != want) ++beyond_bf16;
      }
    }
    EXPECT_GT(beyond_bf16, m * n / 4) << "the test needs sums that bf16 cannot hold";
  }
  omp_set_num_threads(saved);
}

// GEMMs called from inside a parallel region (each thread its own problem, sharing one cached
// primitive) give the same bits as the same calls made one after another: nested calls run serially
// and the scratchpads are per thread.
template <typename T>
void expect_same_inside_parallel_region() {
  const int64_t m = 64, n = 96, k = 80, count = 4;
  const Stored<T> a = random_stored<T>(m, k, k, count, 5), b = random_stored<T>(k, n, n, 1, 6);
  auto run = [&](std::vector<T>& c, int64_t i) {
    gemm(GemmArgs<T>{.m = m,
                     .n = n,
                     .k = k,
                     .a = a.data.data() + i * m * k,
                     .lda = k,
                     .b = b.data.data(),
                     .ldb = n,
                     .c = c.data() + i * m * n,
                     .ldc = n});
  };
  std::vector<T> serial(static_cast<size_t>(count * m * n)), nested(serial.size());
  for (int64_t i = 0; i < count; ++i) run(serial, i);
  parallel_for(count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) run(nested, i);
  });
  for (size_t i = 0; i < serial.size(); ++i) {
    ASSERT_EQ(static_cast<double>(static_cast<compute_t<T>>(serial[i])),
              static_cast<double>(static_cast<compute_t<T>>(nested[i])))
        << i;
  }
}

TEST(GemmKernelThreads, SameResultInsideParallelRegion) {
  expect_same_inside_parallel_region<float>();
  expect_same_inside_parallel_region<double>();
  expect_same_inside_parallel_region<Half>();
  expect_same_inside_parallel_region<BFloat16>();
}

}  // namespace
}  // namespace mantissa::cpu
