// GEMM on CUDA. On the CPU (every build): the row-major to column-major mapping computes the same
// product as ops/matmul/gemm_cpu.h, pointer alignment, the plan cache key, the TF32 switch. On a GPU (skipped
// without one): the cuBLASLt launcher against the CPU GEMM in f32/f64/f16/bf16 with every transpose, odd
// sizes, padded and misaligned operands, broadcast batches, the bias epilogue, k = 0 and the plan cache;
// then mm, bmm, matmul, linear, addmm, baddbmm and dot on CUDA tensors against the same ops on the CPU,
// including transposed and strided operands and the backward of linear. Bounds: tests/cuda/blas_test_support.h.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ops/elementwise/elementwise.h"
#include "ops/matmul/gemm_cpu.h"
#include "ops/matmul/gemm_plan.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/tf32.h"
#include "ops/reduce/reduce.h"
#include "tests/cuda/blas_test_support.h"
#include "tests/ops/op_test_support.h"

#ifdef MANTISSA_WITH_CUDA
#include "ops/matmul/gemm_launch.h"
#endif

namespace mantissa {
namespace {

using cpu::Trans;
using gpu::ColMajorGemm;
using gpu::ColMajorOperand;
using gpu::RowMajorGemm;

std::vector<double> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// Element (r, c) of op(X) for cuBLAS's column-major operand X (batch offset already applied).
double col_major_at(const ColMajorOperand& x, const double* p, int64_t r, int64_t c) {
  return x.trans == Trans::kNo ? p[r + c * x.ld] : p[c + r * x.ld];
}

// ---- CPU: planning ----

// cuBLAS's column-major product, evaluated naively from the plan, must equal the row-major GEMM of
// ops/matmul/gemm_cpu.h in f64 (both exact to ~k ulps of f64: 1e-12 is far above that, far below any mix-up).
TEST(GemmPlan, ColumnMajorMappingComputesTheRowMajorProduct) {
  const int64_t batch = 3, pad = 2;
  for (int64_t m : {1, 5, 13}) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        for (int broadcast = 0; broadcast < 3; ++broadcast) {  // none, A broadcast, B broadcast
          const int64_t n = 7, k = 4;
          const bool at = ta == Trans::kYes, bt = tb == Trans::kYes;
          const int64_t lda = (at ? m : k) + pad, ldb = (bt ? k : n) + pad, ldc = n + pad;
          const int64_t size_a = (at ? k : m) * lda, size_b = (bt ? n : k) * ldb, size_c = m * ldc;
          const RowMajorGemm rm{.trans_a = ta,
                                .trans_b = tb,
                                .m = m,
                                .n = n,
                                .k = k,
                                .lda = lda,
                                .ldb = ldb,
                                .ldc = ldc,
                                .batch = batch,
                                .stride_a = broadcast == 1 ? 0 : size_a,
                                .stride_b = broadcast == 2 ? 0 : size_b,
                                .stride_c = size_c};
          const std::vector<double> a = random_values(static_cast<size_t>(batch * size_a), 1);
          const std::vector<double> b = random_values(static_cast<size_t>(batch * size_b), 2);
          std::vector<double> want(static_cast<size_t>(batch * size_c), 0.0);
          cpu::gemm_batched(cpu::BatchedGemmArgs<double>{.gemm = {.trans_a = ta,
                                                                  .trans_b = tb,
                                                                  .m = m,
                                                                  .n = n,
                                                                  .k = k,
                                                                  .a = a.data(),
                                                                  .lda = lda,
                                                                  .b = b.data(),
                                                                  .ldb = ldb,
                                                                  .c = want.data(),
                                                                  .ldc = ldc},
                                                         .batch = batch,
                                                         .stride_a = rm.stride_a,
                                                         .stride_b = rm.stride_b,
                                                         .stride_c = rm.stride_c});

          const ColMajorGemm cm = gpu::to_column_major(rm);
          SCOPED_TRACE("m " + std::to_string(m) + " ta " + std::to_string(at) + " tb " + std::to_string(bt) +
                       " broadcast " + std::to_string(broadcast));
          // cuBLAS's validity rules: ld at least the stored rows; D is m x n with ldc >= m.
          EXPECT_GE(cm.a.ld, cm.a.rows);
          EXPECT_GE(cm.b.ld, cm.b.rows);
          EXPECT_GE(cm.ldc, cm.m);
          EXPECT_EQ((cm.a.trans == Trans::kNo ? cm.a.rows : cm.a.cols), cm.m);
          EXPECT_EQ((cm.b.trans == Trans::kNo ? cm.b.cols : cm.b.rows), cm.n);
          for (int64_t z = 0; z < cm.batch; ++z) {
            const double* pa = b.data() + z * cm.a.batch_stride;  // cuBLAS's A is our B
            const double* pb = a.data() + z * cm.b.batch_stride;
            for (int64_t j = 0; j < cm.n; ++j) {
              for (int64_t i = 0; i < cm.m; ++i) {
                double d = 0;
                for (int64_t l = 0; l < cm.k; ++l) d += col_major_at(cm.a, pa, i, l) * col_major_at(cm.b, pb, l, j);
                const double w = want[static_cast<size_t>(z * cm.stride_c + i + j * cm.ldc)];
                ASSERT_NEAR(d, w, 1e-12) << "batch " << z << " column-major (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
}

// The largest power of two dividing address and batch stride, capped at 256.
TEST(GemmPlan, AlignmentBytes) {
  EXPECT_EQ(gpu::alignment_bytes(0, 0), 256);
  EXPECT_EQ(gpu::alignment_bytes(0x7f0000001000, 0), 256);
  EXPECT_EQ(gpu::alignment_bytes(0x7f0000001000, 4096 * 4), 256);
  EXPECT_EQ(gpu::alignment_bytes(0x7f0000001010, 0), 16);
  EXPECT_EQ(gpu::alignment_bytes(0x7f0000001002, 0), 2);       // an f16 view at an odd element offset
  EXPECT_EQ(gpu::alignment_bytes(0x7f0000001000, 37 * 4), 4);  // aligned base, odd f32 batch stride
  EXPECT_EQ(gpu::alignment_bytes(0x7f0000001040, 6), 2);
}

gpu::GemmKey sample_key() {
  return gpu::GemmKey{.device = 0,
                      .dtype = DType::kBF16,
                      .math = gpu::GemmMath::kExact,
                      .epilogue = gpu::GemmEpilogue::kNone,
                      .gemm = gpu::to_column_major({.m = 64, .n = 48, .k = 32, .lda = 32, .ldb = 48, .ldc = 48}),
                      .align_a = 256,
                      .align_b = 256,
                      .align_c = 256,
                      .align_bias = 256};
}

// Equal keys are equal and hash alike; a change in any one field makes a different key.
TEST(GemmPlan, KeyEqualityCoversEveryField) {
  const gpu::GemmKey base = sample_key();
  const gpu::GemmKeyHash hash;
  EXPECT_TRUE(base == sample_key());
  EXPECT_EQ(hash(base), hash(sample_key()));
  std::vector<std::function<void(gpu::GemmKey&)>> changes = {
      [](gpu::GemmKey& k) { k.device = 1; },
      [](gpu::GemmKey& k) { k.dtype = DType::kF16; },
      [](gpu::GemmKey& k) { k.math = gpu::GemmMath::kTf32; },
      [](gpu::GemmKey& k) { k.epilogue = gpu::GemmEpilogue::kBias; },
      [](gpu::GemmKey& k) { k.gemm.m += 1; },
      [](gpu::GemmKey& k) { k.gemm.n += 1; },
      [](gpu::GemmKey& k) { k.gemm.k += 1; },
      [](gpu::GemmKey& k) { k.gemm.a.trans = Trans::kYes; },
      [](gpu::GemmKey& k) { k.gemm.a.ld += 8; },
      [](gpu::GemmKey& k) { k.gemm.a.batch_stride = 1 << 20; },
      [](gpu::GemmKey& k) { k.gemm.b.trans = Trans::kYes; },
      [](gpu::GemmKey& k) { k.gemm.b.ld += 8; },
      [](gpu::GemmKey& k) { k.gemm.b.rows += 1; },
      [](gpu::GemmKey& k) { k.gemm.ldc += 8; },
      [](gpu::GemmKey& k) { k.gemm.stride_c = 1 << 20; },
      [](gpu::GemmKey& k) { k.gemm.batch = 2; },
      [](gpu::GemmKey& k) { k.align_a = 2; },
      [](gpu::GemmKey& k) { k.align_b = 4; },
      [](gpu::GemmKey& k) { k.align_c = 8; },
      [](gpu::GemmKey& k) { k.align_bias = 16; },
  };
  std::set<size_t> hashes = {hash(base)};
  for (size_t i = 0; i < changes.size(); ++i) {
    gpu::GemmKey changed = base;
    changes[i](changed);
    EXPECT_FALSE(changed == base) << "change " << i;
    hashes.insert(hash(changed));
  }
  // Not required for correctness, but a hash that ignored a field would collide here.
  EXPECT_EQ(hashes.size(), changes.size() + 1);
}

// The shapes of a training run (every m, n, k up to 64) hash to distinct values: the mixer spreads.
TEST(GemmPlan, KeyHashSpreadsShapes) {
  std::set<size_t> hashes;
  int64_t count = 0;
  for (int64_t m = 1; m <= 64; m += 3) {
    for (int64_t n = 1; n <= 64; n += 3) {
      for (int64_t k = 1; k <= 64; k += 3) {
        gpu::GemmKey key = sample_key();
        key.gemm = gpu::to_column_major({.m = m, .n = n, .k = k, .lda = k, .ldb = n, .ldc = n});
        hashes.insert(gpu::GemmKeyHash{}(key));
        ++count;
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(hashes.size()), count);
}

// cuBLASLt falls back to plain cuBLAS only for what it does not support; an invalid value (an argument
// bug: the algorithm was chosen for exactly these layouts) and every other failure are raised.
TEST(GemmPlan, CublasLtDeclinesOnlyWhatItDoesNotSupport) {
  using gpu::LtVerdict;
  constexpr int kOk = static_cast<int>(gpu::CublasStatus::kSuccess);
  constexpr int kInvalid = static_cast<int>(gpu::CublasStatus::kInvalidValue);
  constexpr int kUnsupported = static_cast<int>(gpu::CublasStatus::kNotSupported);
  constexpr int kAllocFailed = 3, kExecutionFailed = 13, kInternalError = 14;  // cublas_api.h's values
  EXPECT_EQ(gpu::lt_matmul_verdict(kOk), LtVerdict::kUse);
  EXPECT_EQ(gpu::lt_matmul_verdict(kUnsupported), LtVerdict::kDecline);
  for (int status : {kInvalid, kAllocFailed, kExecutionFailed, kInternalError}) {
    EXPECT_EQ(gpu::lt_matmul_verdict(status), LtVerdict::kRaise) << "status " << status;
  }
  constexpr size_t kLimit = size_t{32} << 20;
  EXPECT_EQ(gpu::lt_heuristic_verdict(kOk, 1, kOk, kLimit, kLimit), LtVerdict::kUse);
  EXPECT_EQ(gpu::lt_heuristic_verdict(kOk, 0, kOk, 0, kLimit), LtVerdict::kDecline);  // no algorithm
  EXPECT_EQ(gpu::lt_heuristic_verdict(kOk, 1, kUnsupported, 0, kLimit), LtVerdict::kDecline);
  EXPECT_EQ(gpu::lt_heuristic_verdict(kOk, 1, kOk, kLimit + 1, kLimit), LtVerdict::kDecline);
  EXPECT_EQ(gpu::lt_heuristic_verdict(kUnsupported, 0, kOk, 0, kLimit), LtVerdict::kDecline);
  EXPECT_EQ(gpu::lt_heuristic_verdict(kInvalid, 0, kOk, 0, kLimit), LtVerdict::kRaise);
  EXPECT_EQ(gpu::lt_heuristic_verdict(kInternalError, 1, kOk, 0, kLimit), LtVerdict::kRaise);
}

// The error message names the case: dtype, cuBLAS's m, n, k, every operand's layout and alignment.
TEST(GemmPlan, DescribeNamesTheCase) {
  gpu::GemmKey key = sample_key();
  key.gemm = gpu::to_column_major({.trans_a = Trans::kYes,
                                   .m = 64,
                                   .n = 48,
                                   .k = 32,
                                   .lda = 64,
                                   .ldb = 48,
                                   .ldc = 48,
                                   .batch = 3,
                                   .stride_a = 2048,
                                   .stride_b = 1536,
                                   .stride_c = 3072});
  key.align_b = 2;
  key.epilogue = gpu::GemmEpilogue::kBias;
  key.align_bias = 16;
  const std::string d = gpu::describe(key);
  for (const char* part :
       {"bf16", "m 48 n 64 k 32", "batch 3", "A N 48x32 ld 48 batch stride 1536 aligned 256 B",
        "B T 64x32 ld 64 batch stride 2048 aligned 2 B", "C ld 48 batch stride 3072", "bias epilogue aligned 16 B"}) {
    EXPECT_NE(d.find(part), std::string::npos) << "'" << part << "' missing from: " << d;
  }
}

// Restores the TF32 switch when a test ends.
class Tf32Scope {
 public:
  explicit Tf32Scope(Tf32 mode) : saved_(cuda_matmul_tf32()) { set_cuda_matmul_tf32(mode); }
  ~Tf32Scope() { set_cuda_matmul_tf32(saved_); }

 private:
  Tf32 saved_;
};

TEST(GemmPlan, Tf32SwitchDefaultsOff) {
  EXPECT_EQ(cuda_matmul_tf32(), Tf32::kOff);
  EXPECT_EQ(cuda_conv_tf32(), Tf32::kOff);
  {
    Tf32Scope on(Tf32::kOn);
    EXPECT_EQ(cuda_matmul_tf32(), Tf32::kOn);
    EXPECT_EQ(cuda_conv_tf32(), Tf32::kOff);  // separate switches, as PyTorch's
  }
  EXPECT_EQ(cuda_matmul_tf32(), Tf32::kOff);
}

// ---- GPU: the launcher over raw device buffers (no CUDA tensors needed) ----

#ifdef MANTISSA_WITH_CUDA
template <typename T>
double as_double(T v) {
  return static_cast<double>(static_cast<compute_t<T>>(v));
}

template <typename T>
std::vector<T> random_host(size_t n, uint32_t seed) {
  std::vector<T> out;
  for (double v : random_values(n, seed)) out.push_back(T(static_cast<float>(v)));
  return out;
}

// One GPU GEMM case against cpu::gemm_batched on the same host data. `offset` shifts every device pointer
// by that many elements (an odd offset leaves 2- or 4-byte alignment). C starts poisoned (nan) when beta
// is 0 and holds random values otherwise; its padding columns must come back untouched.
struct LaunchCase {
  Trans ta = Trans::kNo, tb = Trans::kNo;
  int64_t m = 1, n = 1, k = 1, batch = 1, pad = 0, offset = 0;
  bool broadcast_b = false, with_bias = false;
  double alpha = 1.0, beta = 0.0;
};

template <typename T>
void run_launch_case(const LaunchCase& lc) {
  const bool at = lc.ta == Trans::kYes, bt = lc.tb == Trans::kYes;
  const int64_t m = lc.m, n = lc.n, k = lc.k;
  const int64_t lda = (at ? m : k) + lc.pad, ldb = (bt ? k : n) + lc.pad, ldc = n + lc.pad;
  const int64_t size_a = (at ? k : m) * lda, size_b = (bt ? n : k) * ldb, size_c = m * ldc;
  const int64_t stride_b = lc.broadcast_b ? 0 : size_b;
  const std::vector<T> a = random_host<T>(static_cast<size_t>(lc.batch * size_a), 11);
  const std::vector<T> b = random_host<T>(static_cast<size_t>((lc.broadcast_b ? 1 : lc.batch) * size_b), 12);
  const std::vector<T> bias = random_host<T>(static_cast<size_t>(n), 13);
  std::vector<T> c0 = random_host<T>(static_cast<size_t>(lc.batch * size_c), 14);

  testing::DeviceBuffer<T> da(a.size() + lc.offset), db(b.size() + lc.offset), dc(c0.size() + lc.offset),
      dbias(bias.size() + lc.offset);
  std::vector<T> a_up(static_cast<size_t>(lc.offset)), b_up(a_up), bias_up(a_up);
  a_up.insert(a_up.end(), a.begin(), a.end());
  b_up.insert(b_up.end(), b.begin(), b.end());
  bias_up.insert(bias_up.end(), bias.begin(), bias.end());
  da.upload(a_up);
  db.upload(b_up);
  dbias.upload(bias_up);
  if (lc.beta != 0.0) {
    std::vector<T> c_up(static_cast<size_t>(lc.offset));
    c_up.insert(c_up.end(), c0.begin(), c0.end());
    dc.upload(c_up);
  } else {
    const std::vector<T> poisoned = dc.download();  // 0xFFFF...: nan; the padding must keep it
    c0.assign(poisoned.begin() + lc.offset, poisoned.end());
  }

  const cpu::GemmArgs<T> host_args{.trans_a = lc.ta,
                                   .trans_b = lc.tb,
                                   .m = m,
                                   .n = n,
                                   .k = k,
                                   .lda = lda,
                                   .ldb = ldb,
                                   .ldc = ldc,
                                   .alpha = lc.alpha,
                                   .beta = lc.beta};
  cpu::BatchedGemmArgs<T> dev{
      .gemm = host_args, .batch = lc.batch, .stride_a = size_a, .stride_b = stride_b, .stride_c = size_c};
  dev.gemm.a = da.get() + lc.offset;
  dev.gemm.b = db.get() + lc.offset;
  dev.gemm.c = dc.get() + lc.offset;
  gpu::gemm(gpu::GemmArgs<T>{.gemm = dev, .bias = lc.with_bias ? dbias.get() + lc.offset : nullptr}, 0, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<T> got_all = dc.download();
  const std::vector<T> got(got_all.begin() + lc.offset, got_all.end());

  // The CPU reference: the bias (if any) pre-filled into C and accumulated onto with beta 1.
  std::vector<T> want = c0;
  cpu::BatchedGemmArgs<T> host{
      .gemm = host_args, .batch = lc.batch, .stride_a = size_a, .stride_b = stride_b, .stride_c = size_c};
  if (lc.with_bias) {
    for (int64_t z = 0; z < lc.batch; ++z)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          want[static_cast<size_t>(z * size_c + i * ldc + j)] = bias[static_cast<size_t>(j)];
        }
    host.gemm.beta = 1.0;
  }
  host.gemm.a = a.data();
  host.gemm.b = b.data();
  host.gemm.c = want.data();
  cpu::gemm_batched(host);

  std::vector<double> got_d, want_d, abs_sum;
  for (int64_t z = 0; z < lc.batch; ++z) {
    const T* pa = a.data() + z * size_a;
    const T* pb = b.data() + z * stride_b;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        const size_t idx = static_cast<size_t>(z * size_c + i * ldc + j);
        if (j >= n) {  // padding: untouched, bit for bit
          ASSERT_EQ(std::memcmp(&got[idx], &c0[idx], sizeof(T)), 0) << "padding overwritten at " << idx;
          continue;
        }
        double s = (lc.beta != 0.0 ? std::abs(lc.beta * as_double(c0[idx])) : 0.0) +
                   (lc.with_bias ? std::abs(as_double(bias[static_cast<size_t>(j)])) : 0.0);
        for (int64_t l = 0; l < k; ++l) {
          s += std::abs(lc.alpha * as_double(at ? pa[l * lda + i] : pa[i * lda + l]) *
                        as_double(bt ? pb[j * ldb + l] : pb[l * ldb + j]));
        }
        got_d.push_back(as_double(got[idx]));
        want_d.push_back(as_double(want[idx]));
        abs_sum.push_back(s);
      }
    }
  }
  // depth k + 2: the k products plus the beta * C and bias terms. A bf16 bias costs one more rounding on the GPU:
  // cuBLASLt rounds the product to bf16 before it adds the bias, in its epilogue and onto a broadcast C alike.
  const bool bf16_bias = std::is_same_v<T, BFloat16> && lc.with_bias;
  EXPECT_EQ(testing::count_beyond_bound(got_d, want_d, abs_sum, k + 2, dtype_v<T>, 1.0, bf16_bias), 0);
}

template <typename T>
class CudaGemmLauncher : public ::testing::Test {};
using GemmTypes = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(CudaGemmLauncher, GemmTypes);

// Every transpose pair; sizes that are not multiples of 8 (and one that is); padded leading dims; batches
// with B broadcast; alpha and beta; operands at an odd element offset (2- or 4-byte aligned), which the
// alignment preferences (or the cuBLAS fallback) must handle.
TYPED_TEST(CudaGemmLauncher, MatchesCpuGemm) {
  MT_SKIP_WITHOUT_CUDA();
  struct Size {
    int64_t m, n, k;
  };
  for (const Size s : {Size{37, 53, 29}, Size{64, 128, 256}, Size{1, 1, 1}, Size{5, 300, 7}}) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        for (int variant = 0; variant < 3; ++variant) {
          SCOPED_TRACE("m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
                       " trans " + std::to_string(static_cast<int>(ta)) + std::to_string(static_cast<int>(tb)) +
                       " variant " + std::to_string(variant));
          LaunchCase lc{.ta = ta, .tb = tb, .m = s.m, .n = s.n, .k = s.k};
          if (variant == 1) {  // padded, batched with B broadcast, alpha/beta
            lc.batch = 3;
            lc.pad = 3;
            lc.broadcast_b = true;
            lc.alpha = 0.5;
            lc.beta = 2.0;
          } else if (variant == 2) {  // misaligned pointers, batched
            lc.batch = 2;
            lc.offset = 1;
          }
          run_launch_case<TypeParam>(lc);
        }
      }
    }
  }
}

// The bias epilogue (linear's bias [n]): with an aligned bias it goes through cuBLASLt's epilogue, with a
// misaligned one through the broadcast fallback; both must equal bias-prefilled CPU GEMMs, poison in C.
TYPED_TEST(CudaGemmLauncher, BiasEpilogue) {
  MT_SKIP_WITHOUT_CUDA();
  for (int64_t offset : {0, 1}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + " tb " + std::to_string(static_cast<int>(tb)));
      run_launch_case<TypeParam>(
          {.tb = tb, .m = 33, .n = 40, .k = 19, .batch = 1, .offset = offset, .with_bias = true, .alpha = 0.75});
      run_launch_case<TypeParam>({.tb = tb, .m = 8, .n = 24, .k = 64, .batch = 3, .offset = offset, .with_bias = true});
    }
  }
}

// k = 0: C = beta * C (+ bias); beta 0 writes zeros (or the bias) over the poison.
TYPED_TEST(CudaGemmLauncher, EmptyInnerDimension) {
  MT_SKIP_WITHOUT_CUDA();
  run_launch_case<TypeParam>({.m = 3, .n = 5, .k = 0, .batch = 2, .beta = 0.5});
  run_launch_case<TypeParam>({.m = 3, .n = 5, .k = 0, .batch = 2, .beta = 0.0});
  run_launch_case<TypeParam>({.m = 3, .n = 5, .k = 0, .with_bias = true});
}

// A repeated shape reuses its plan: no second descriptor build or heuristic query.
TEST(CudaGemmPlans, RepeatedShapeReusesPlan) {
  MT_SKIP_WITHOUT_CUDA();
  const LaunchCase lc{.m = 48, .n = 80, .k = 96};
  run_launch_case<float>(lc);
  const gpu::GemmStats first = gpu::gemm_stats();
  run_launch_case<float>(lc);
  const gpu::GemmStats second = gpu::gemm_stats();
  EXPECT_EQ(second.plans_built, first.plans_built);
  EXPECT_EQ(second.plan_hits, first.plan_hits + 1);
}

// With TF32 on, f32 operands are cut to 10-bit mantissas before the f32 accumulation: relative error
// 2^-11 each when rounded, 2^-10 when truncated (kernels may do either), so at most 2^-9 per product:
// bound 2^-9 S + 2 k 2^-24 S, written as a slack on the f32 bound.
TEST(CudaGemmPlans, Tf32StaysWithinTf32Bound) {
  MT_SKIP_WITHOUT_CUDA();
  Tf32Scope on(Tf32::kOn);
  const int64_t m = 64, n = 64, k = 512;
  const std::vector<float> a = random_host<float>(static_cast<size_t>(m * k), 21);
  const std::vector<float> b = random_host<float>(static_cast<size_t>(k * n), 22);
  testing::DeviceBuffer<float> da(a.size()), db(b.size()), dc(static_cast<size_t>(m * n));
  da.upload(a);
  db.upload(b);
  gpu::gemm(gpu::GemmArgs<float>{.gemm = {.gemm = {.m = m,
                                                   .n = n,
                                                   .k = k,
                                                   .a = da.get(),
                                                   .lda = k,
                                                   .b = db.get(),
                                                   .ldb = n,
                                                   .c = dc.get(),
                                                   .ldc = n}}},
            0, nullptr);
  const std::vector<float> got = dc.download();
  std::vector<double> got_d, want_d, abs_sum;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, s = 0;
      for (int64_t l = 0; l < k; ++l) {
        want += double{a[i * k + l]} * b[l * n + j];
        s += std::abs(double{a[i * k + l]} * b[l * n + j]);
      }
      got_d.push_back(got[static_cast<size_t>(i * n + j)]);
      want_d.push_back(want);
      abs_sum.push_back(s);
    }
  }
  // slack so that slack * 2 k 2^-24 = 2^-9 + 2 k 2^-24, i.e. slack = 1 + 2^15 / (2 k).
  const double slack = 1.0 + std::ldexp(1.0, 15) / (2.0 * static_cast<double>(k));
  EXPECT_EQ(testing::count_beyond_bound(got_d, want_d, abs_sum, k, DType::kF32, slack), 0);
}
#endif  // MANTISSA_WITH_CUDA

}  // namespace
}  // namespace mantissa
