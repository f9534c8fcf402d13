// CUDA reductions against the CPU: sum and mean over leading, trailing, middle and all dims (row and
// column modes, sliced and not), on contiguous and permuted inputs in f32, f16 and bf16; sum_to as a
// bias gradient; max/argmax with ties and NaNs, exact. Skipped without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::on_cuda;
using testing::random_tensor;
using testing::within_rel;
using testing::within_ulps;

// Both backends accumulate in f32 (f64 for f64) in different orders. Inputs are in [0, 1) (no
// cancellation), so each result is within n * eps32 relative of the exact sum on either side; the n
// used here stay below 1e5, and a pairwise/sliced order keeps the real error far below that bound:
// 1e-5 relative covers f32. 16-bit outputs add one rounding of the result (2^-11, 2^-8 relative).
double rtol_for(DType dt) { return dt == DType::kF32 ? 1e-5 : (dt == DType::kF16 ? 1e-3 : 8e-3); }

TEST(CudaReduce, SumAndMeanOverDimsMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  const std::vector<Shape> dim_sets = {{0}, {2}, {1}, {0, 2}, {0, 1}, {-1}};
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor x = random_tensor({48, 33, 70}, dt, 201, 0.0, 1.0);
    const Tensor xp = random_tensor({70, 48, 33}, dt, 202, 0.0, 1.0).permute({1, 2, 0});  // non-contiguous
    for (const Tensor& in : {x, xp}) {
      const Tensor d = on_cuda(in);
      for (const Shape& dims : dim_sets) {
        EXPECT_TRUE(within_rel(sum(in, dims), sum(d, dims), rtol_for(dt), 0)) << dtype_name(dt) << shape_str(dims);
        EXPECT_TRUE(within_rel(mean(in, dims, KeepDim::kYes), mean(d, dims, KeepDim::kYes), rtol_for(dt), 0))
            << dtype_name(dt) << shape_str(dims);
      }
      EXPECT_TRUE(within_rel(sum(in), sum(d), rtol_for(dt), 0)) << dtype_name(dt);
      EXPECT_TRUE(within_rel(mean(in), mean(d), rtol_for(dt), 0)) << dtype_name(dt);
    }
  }
}

TEST(CudaReduce, LargeFullAndColumnReductionsAreSliced) {
  MT_SKIP_WITHOUT_CUDA();
  // 3M elements reduced to one value (row mode, sliced) and a [8192, 768] bias gradient (column mode,
  // sliced along the rows). f32 accumulation over up to 3M terms of [0, 1): relative error below 1e-4
  // for the sliced pairwise-like order (each slice sums ~1e3 terms, slices are then added in order).
  const Tensor big = random_tensor({3'000'000}, DType::kF32, 203, 0.0, 1.0);
  EXPECT_TRUE(within_rel(sum(big.to(DType::kF64)).to(DType::kF32), sum(on_cuda(big)), 1e-5, 0));
  const Tensor g = random_tensor({8192, 768}, DType::kF32, 204, 0.0, 1.0);
  EXPECT_TRUE(within_rel(sum_to(g, {768}), sum_to(on_cuda(g), {768}), 1e-5, 0));
  const Tensor g16 = g.to(DType::kBF16);
  EXPECT_TRUE(within_rel(sum_to(g16, {1, 768}), sum_to(on_cuda(g16), {1, 768}), 8e-3, 0));
}

TEST(CudaReduce, SumBackwardExpandsTheGradient) {
  MT_SKIP_WITHOUT_CUDA();
  Tensor x = random_tensor({6, 7}, DType::kF32, 205);
  Tensor xd = on_cuda(x);
  x.set_requires_grad(true);
  xd.set_requires_grad(true);
  const Tensor g = random_tensor({7}, DType::kF32, 206);
  mean(x, {0}).backward(g);
  mean(xd, {0}).backward(on_cuda(g));
  // g / 6 broadcast: one multiply on each side, the same operation: exact.
  EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0));
}

TEST(CudaReduce, EmptyAndSizeOneDimsMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  // A zero-length reduced dim with outputs left ([4, 0] over dim 1) crashed the host planning before.
  // Sums of nothing are 0 and means NaN (0 * 1/0) on both sides; a size-1 dim is the input times 1: exact.
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor e = zeros({4, 0}, {.dtype = dt});
    const Tensor ed = on_cuda(e);
    for (KeepDim k : {KeepDim::kNo, KeepDim::kYes}) {
      EXPECT_TRUE(within_ulps(sum(e, {1}, k), sum(ed, {1}, k), 0)) << dtype_name(dt);
      EXPECT_TRUE(within_ulps(mean(e, {1}, k), mean(ed, {1}, k), 0)) << dtype_name(dt);
      EXPECT_TRUE(within_ulps(sum(e, {0}, k), sum(ed, {0}, k), 0)) << dtype_name(dt);  // no outputs
    }
    EXPECT_TRUE(within_ulps(sum(e), sum(ed), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(mean(e), mean(ed), 0)) << dtype_name(dt);
    // The composed device paths: logsumexp of nothing is -inf, every norm of nothing 0, as the CPU kernels.
    EXPECT_TRUE(within_ulps(logsumexp(e, {1}), logsumexp(ed, {1}), 0)) << dtype_name(dt);
    for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
      EXPECT_TRUE(within_ulps(norm(e, {.p = p, .dims = {1}}), norm(ed, {.p = p, .dims = {1}}), 0))
          << dtype_name(dt) << " p " << p;
    }
    // max refuses an empty input on both devices alike.
    EXPECT_THROW(max(e, 1), Error);
    EXPECT_THROW(max(ed, 1), Error);
    const Tensor one = random_tensor({5, 1, 3}, dt, 209);
    const Tensor oned = on_cuda(one);
    EXPECT_TRUE(within_ulps(sum(one, {1}), sum(oned, {1}), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(mean(one, {1}), mean(oned, {1}), 0)) << dtype_name(dt);
  }
}

TEST(CudaReduce, MaxAndArgmaxMatchCpuExactly) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    // Small integers so that ties are common; a few NaNs in some rows and columns.
    Generator gen(207);
    std::vector<float> v(37 * 100);
    for (float& e : v)
      e = gen.uniform_float() < 0.01f ? std::numeric_limits<float>::quiet_NaN()
                                      : static_cast<float>(gen.next_u32() % 8);
    const Tensor x = from_vector<float>(v, {37, 100}).to(dt);
    for (int64_t dim : {0, 1}) {
      const MaxResult cpu_r = max(x, dim);
      const MaxResult gpu_r = max(on_cuda(x), dim);
      // Selection, no arithmetic: values and indices exact.
      EXPECT_TRUE(within_ulps(cpu_r.values, gpu_r.values, 0)) << dtype_name(dt) << " dim " << dim;
      EXPECT_TRUE(within_ulps(cpu_r.indices.to(DType::kF64), gpu_r.indices.to(DType::kF64), 0));
      EXPECT_TRUE(within_ulps(argmax(x, dim).to(DType::kF64), argmax(on_cuda(x), dim).to(DType::kF64), 0));
    }
  }
  const Tensor i = from_vector<int64_t>({3, 9, 9, -2, 9, 0}, {2, 3});
  EXPECT_TRUE(within_ulps(max(i, 1).indices.to(DType::kF64), max(on_cuda(i), 1).indices.to(DType::kF64), 0));
}

TEST(CudaReduce, MaxBackwardMatchesCpu) {
  MT_SKIP_WITHOUT_CUDA();
  // Two maxima in row 0 (the full max splits its gradient between them) and a max per column.
  Tensor x = from_vector<float>({1, 5, 2, 5, 0, -1, 3, 4, 4}, {3, 3});
  Tensor xd = on_cuda(x);
  x.set_requires_grad(true);
  xd.set_requires_grad(true);
  max(x).backward();
  max(xd).backward();
  EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0));  // 1/2 at both maxima: exact
  Tensor y = x.detach(), yd = xd.detach();
  y.set_requires_grad(true);
  yd.set_requires_grad(true);
  const Tensor g = random_tensor({3}, DType::kF32, 208);
  max(y, 0).values.backward(g);
  max(yd, 0).values.backward(on_cuda(g));
  EXPECT_TRUE(within_ulps(y.grad(), yd.grad(), 0));  // g placed at the argmax: exact
  // A 0-d input: the gradient passes through (the backward kernel would index the 0-d shape by dim).
  Tensor s = on_cuda(full({}, 3.0));
  s.set_requires_grad(true);
  (max(s, 0).values * 2.0).backward();
  EXPECT_EQ(s.grad().shape(), Shape{});
  EXPECT_EQ(s.grad().item(), 2.0);
}

}  // namespace
}  // namespace mantissa
