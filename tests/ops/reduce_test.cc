// Reductions' forward semantics: fp32 accumulation for 16-bit inputs, dims and keepdim, strided and large
// inputs, empty tensors, var's correction, max's indices, ties and nan, sum_to.
#include "ops/reduce/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/elementwise/elementwise.h"
#include "tests/ops/op_test_support.h"

namespace mantissa {
namespace {

using testing::values;

TEST(Reduce, SixteenBitSumsAccumulateInFp32) {
  // A 16-bit accumulator would stall: f16 at 2048 (1 is half an ulp there), bf16 at 256.
  EXPECT_EQ(values(sum(ones({4096}, {.dtype = DType::kF16})))[0], 4096.0);
  EXPECT_EQ(values(sum(ones({4096}, {.dtype = DType::kBF16})))[0], 4096.0);
  EXPECT_EQ(sum(ones({4}, {.dtype = DType::kBF16})).dtype(), DType::kBF16);
  EXPECT_EQ(values(mean(full({3000}, 0.5, {.dtype = DType::kF16})))[0], 0.5);
  // The result is rounded once at the end: 3000 * 0.1 in fp32, then to f16.
  const Tensor x = full({3000}, 0.1, {.dtype = DType::kF16});
  const double want = static_cast<float>(Half(3000.0f * static_cast<float>(Half(0.1f))));
  EXPECT_NEAR(values(sum(x))[0], want, 0.25) << "within one f16 ulp (0.25 at 300) of the fp32 sum";
}

TEST(Reduce, DimsAndKeepdim) {
  const Tensor x = arange(24.0, {.dtype = DType::kF64}).reshape({2, 3, 4});
  EXPECT_EQ(sum(x).shape(), Shape{});
  EXPECT_EQ(values(sum(x))[0], 276.0);
  EXPECT_EQ(sum(x, {1}).shape(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {1}, KeepDim::kYes).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(values(sum(x, {0, 2})), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(values(sum(x, {-1})), (std::vector<double>{6, 22, 38, 54, 70, 86}));
  EXPECT_EQ(values(mean(x, {0})), values(add(x.select(0, 0), 6.0)));
  EXPECT_EQ(mean(x, {0, 1, 2}, KeepDim::kYes).shape(), (Shape{1, 1, 1}));
}

TEST(Reduce, StridedInputsMatchContiguous) {
  const Tensor x = arange(60.0, {.dtype = DType::kF32}).reshape({3, 4, 5});
  const Tensor p = x.permute({2, 0, 1});  // non-contiguous
  ASSERT_FALSE(p.is_contiguous());
  EXPECT_EQ(values(sum(p, {1})), values(sum(p.contiguous(), {1})));
  EXPECT_EQ(values(var(p, {2})), values(var(p.contiguous(), {2})));
  EXPECT_EQ(values(max(p, 0).values), values(max(p.contiguous(), 0).values));
  const Tensor sliced = x.slice(2, 0, 5, 2);
  EXPECT_EQ(values(sum(sliced, {2})), values(sum(sliced.contiguous(), {2})));
}

TEST(Reduce, LargeReductionsAgreeWithADoubleReference) {
  // 1000 x 300: many outputs (the parallel path) and long rows.
  Generator g(3);
  std::vector<double> v(300000);
  for (double& e : v) e = g.uniform_double() * 2 - 1;
  const Tensor x64 = from_vector<double>(v, {1000, 300});
  const Tensor x32 = x64.to(DType::kF32);
  const std::vector<double> s64 = values(sum(x64, {1})), s32 = values(sum(x32, {1}));
  for (int r = 0; r < 1000; ++r) {
    double ref = 0;
    for (int c = 0; c < 300; ++c) ref += v[static_cast<size_t>(r * 300 + c)];
    ASSERT_NEAR(s64[r], ref, 1e-12) << r;
    // f32: 300 terms of magnitude < 1 with blocked partial sums: a few ulps of ~10.
    ASSERT_NEAR(s32[r], ref, 1e-5) << r;
  }
  // Down the columns as well (strided inner walk).
  const std::vector<double> c64 = values(sum(x64, {0}));
  double ref0 = 0;
  for (int r = 0; r < 1000; ++r) ref0 += v[static_cast<size_t>(r * 300)];
  EXPECT_NEAR(c64[0], ref0, 1e-12);
}

TEST(Reduce, LeadingDimSumsMatchTheStridedWalkBitForBit) {
  // A contiguous tensor summed over its leading dims takes the vectorized column sum; a transposed copy
  // of the same values takes the per-output strided walk. Both add row r into lane r % 8 and combine the
  // lanes in one fixed tree, so the results must be identical bits for every dtype, with odd sizes
  // (a partial column block of 64, rows not a multiple of 8) and over 2 leading dims.
  Generator g(11);
  std::vector<double> v(37 * 5 * 131);
  for (double& e : v) e = g.uniform_double() * 2 - 1;
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const Tensor x = from_vector<double>(v, {37, 5, 131}).to(dt);
    const Tensor strided = x.reshape({185, 131}).transpose(0, 1).contiguous().transpose(0, 1);
    ASSERT_FALSE(strided.is_contiguous());
    const Tensor fast = sum(x, {0, 1});
    EXPECT_EQ(fast.dtype(), dt);
    EXPECT_EQ(values(fast), values(sum(strided, {0}))) << dtype_name(dt);
    EXPECT_EQ(values(mean(x, {0, 1})), values(mean(strided, {0}))) << dtype_name(dt);
    const Tensor permuted = x.permute({1, 0, 2}).contiguous().permute({1, 0, 2});  // x's values, strided
    EXPECT_EQ(values(sum(x, {0}, KeepDim::kYes)), values(sum(permuted, {0}, KeepDim::kYes)));
  }
  // Accuracy against a double reference for the f32 column sums (185 terms of magnitude < 1).
  const Tensor x32 = from_vector<double>(v, {185, 131}).to(DType::kF32);
  const std::vector<double> s32 = values(sum(x32, {0}));
  for (int c = 0; c < 131; ++c) {
    double ref = 0;
    for (int r = 0; r < 185; ++r) ref += static_cast<double>(static_cast<float>(v[static_cast<size_t>(r * 131 + c)]));
    ASSERT_NEAR(s32[c], ref, 1e-5) << c;  // a few f32 ulps of ~10
  }
}

TEST(Reduce, EmptyTensors) {
  EXPECT_EQ(values(sum(zeros({0, 3})))[0], 0.0);
  EXPECT_EQ(sum(zeros({0, 3}), {0}).shape(), (Shape{3}));
  EXPECT_EQ(values(sum(zeros({0, 3}), {0})), (std::vector<double>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(values(mean(zeros({0})))[0])) << "mean of nothing is nan, as in PyTorch";
}

TEST(Reduce, VarCorrection) {
  const Tensor x = from_vector<double>({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(values(var(x))[0], 5.0 / 3.0) << "unbiased by default";
  EXPECT_DOUBLE_EQ(values(var(x, VarOptions{.correction = 0}))[0], 1.25);
  EXPECT_TRUE(std::isnan(values(var(from_vector<double>({7})))[0])) << "one sample, correction 1: nan";
  const Tensor m = from_vector<double>({1, 3, 2, 6}, {2, 2});
  EXPECT_EQ(values(var(m, {1})), (std::vector<double>{2, 8}));
  EXPECT_EQ(var(m, {1}, {.keepdim = KeepDim::kYes}).shape(), (Shape{2, 1}));
  // f16 input: the variance of large, close values needs the centred two-pass form.
  const Tensor h = from_vector<float>({1000, 1001, 1002, 1003}).to(DType::kF16);
  EXPECT_EQ(values(var(h))[0], static_cast<double>(static_cast<float>(Half(5.0f / 3.0f))));
}

TEST(Reduce, MaxValuesIndicesTiesAndNan) {
  const Tensor x = from_vector<float>({1, 5, 5, 2, 7, 0}, {2, 3});
  const MaxResult r = max(x, 1);
  EXPECT_EQ(values(r.values), (std::vector<double>{5, 7}));
  EXPECT_EQ(r.indices.dtype(), DType::kI64);
  EXPECT_EQ(r.indices.data<int64_t>()[0], 1) << "the first of tied maxima";
  EXPECT_EQ(r.indices.data<int64_t>()[1], 1);
  EXPECT_EQ(max(x, 0, KeepDim::kYes).values.shape(), (Shape{1, 3}));
  EXPECT_EQ(argmax(x, 0).data<int64_t>()[2], 0);
  EXPECT_EQ(values(max(x))[0], 7.0);
  const Tensor n = from_vector<float>({1, NAN, 3});
  EXPECT_TRUE(std::isnan(values(max(n))[0])) << "nan propagates";
  EXPECT_EQ(max(n, 0).indices.data<int64_t>()[0], 1);
  // Integer tensors reduce too.
  EXPECT_EQ(max(from_vector<int64_t>({3, 9, 4}), 0).values.data<int64_t>()[0], 9);
}

TEST(Reduce, MaxGradients) {
  // max(dim) sends the gradient to the first maximum only; max() shares it among all tied maxima.
  Tensor x = from_vector<double>({1, 5, 5, 2}, {2, 2}).set_requires_grad(true);
  sum(max(x, 1).values).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 1, 0}));
  Tensor y = from_vector<double>({3, 1, 3, 2}).set_requires_grad(true);
  max(y).backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{0.5, 0, 0.5, 0}));
  Tensor h = from_vector<float>({3, 1}, {2}, {.dtype = DType::kF16}).set_requires_grad(true);
  max(h).to(DType::kF32).backward();
  EXPECT_EQ(h.grad().dtype(), DType::kF16);
  // A 0-d input (dim 0 names its one element): the gradient passes through, shaped as the input. The
  // backward kernels index the input's shape by dim, which a 0-d shape does not have.
  Tensor s = full({}, 3.0, {.dtype = DType::kF64}).set_requires_grad(true);
  (max(s, 0).values * 2.0).backward();
  EXPECT_EQ(s.grad().shape(), Shape{});
  EXPECT_EQ(values(s.grad()), (std::vector<double>{2.0}));
}

TEST(Reduce, SumToUndoesBroadcasting) {
  const Tensor g = ones({2, 3, 4}, {.dtype = DType::kF64});
  EXPECT_EQ(values(sum_to(g, {3, 1})), (std::vector<double>{8, 8, 8}));
  EXPECT_EQ(sum_to(g, {3, 1}).shape(), (Shape{3, 1}));
  EXPECT_EQ(values(sum_to(g, {4})), (std::vector<double>{6, 6, 6, 6}));
  EXPECT_EQ(values(sum_to(g, {})), (std::vector<double>{24}));
  EXPECT_TRUE(sum_to(g, {2, 3, 4}).is_same(g)) << "no-op when the shape already matches";
}

}  // namespace
}  // namespace mantissa
