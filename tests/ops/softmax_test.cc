// softmax / log_softmax: PyTorch golden values, f64 references over every dim, gradchecks (also on
// non-contiguous inputs), 16-bit rounding once, numerical stability, fast_expf accuracy, errors.
#include "ops/softmax/softmax.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "ops/softmax/softmax_cpu.h"
#include "tests/ops/nn_testing.h"

namespace mantissa {
namespace {

using testing::all_close;
using testing::check_golden;
using testing::gradcheck;
using testing::random_tensor;

// f64 reference: softmax along `dim` by the definition, through exp/sum/div of the elementwise ops.
Tensor reference_softmax(const Tensor& x, int64_t dim) {
  const Tensor m = max(x, dim, KeepDim::kYes).values;
  const Tensor e = exp(x - m);
  return e / sum(e, {dim}, KeepDim::kYes);
}

TEST(Softmax, GoldenF64) {
  // f64 kernels use std::exp and a plain sum: agreement to ~1e-12 is expected; 1e-10 is the suite's bar.
  check_golden("softmax_last", 1, DType::kF64, 1e-10, 1e-14, [](const auto& in) { return softmax(in[0], -1); });
  check_golden("log_softmax_last", 1, DType::kF64, 1e-10, 1e-14, [](const auto& in) { return log_softmax(in[0], -1); });
}

TEST(Softmax, GoldenF32) {
  // f32 inputs are rounded from the f64 ones (relative 6e-8) and exp is fast_expf (2 ulp): outputs and
  // gradients of order 0.1..1 agree to a few 1e-6; 1e-5 relative with 1e-6 absolute leaves margin.
  check_golden("softmax_last", 1, DType::kF32, 1e-5, 1e-6, [](const auto& in) { return softmax(in[0], -1); });
  check_golden("log_softmax_last", 1, DType::kF32, 1e-5, 1e-6, [](const auto& in) { return log_softmax(in[0], -1); });
}

TEST(Softmax, MatchesReferenceOverEveryDim) {
  const Tensor x = random_tensor({3, 4, 5}, 1, DType::kF64, -5, 5);
  for (int64_t dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(dim);
    // f64 against an f64 composition: only summation order differs.
    EXPECT_TRUE(all_close(softmax(x, dim), reference_softmax(x, dim), 1e-13, 1e-15));
    EXPECT_TRUE(all_close(log_softmax(x, dim), log(reference_softmax(x, dim)), 1e-12, 1e-13));
    // f32: rounding the input (6e-8 relative of |x| <= 5) and fast_expf keep errors near 1e-6.
    EXPECT_TRUE(all_close(softmax(x.to(kFloat32), dim), reference_softmax(x, dim), 1e-5, 1e-7));
    EXPECT_TRUE(all_close(log_softmax(x.to(kFloat32), dim), log(reference_softmax(x, dim)), 1e-5, 2e-6));
  }
}

TEST(Softmax, NonContiguousInput) {
  const Tensor base = random_tensor({4, 6}, 2);
  const Tensor xt = base.t();  // [6, 4], strides (1, 6)
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_TRUE(all_close(softmax(xt, 1), softmax(xt.contiguous(), 1), 0, 0));
  EXPECT_TRUE(all_close(log_softmax(xt, 0), log_softmax(xt.contiguous(), 0), 0, 0));
}

TEST(Softmax, Gradcheck) {
  // Central differences with eps 1e-6 in f64 carry ~1e-9 truncation/rounding error on O(1) values.
  for (int64_t dim : {0, 1, 2}) {
    SCOPED_TRACE(dim);
    const Tensor x = random_tensor({2, 3, 4}, 3 + dim);
    EXPECT_TRUE(gradcheck([dim](const auto& in) { return softmax(in[0], dim); }, {x}));
    EXPECT_TRUE(gradcheck([dim](const auto& in) { return log_softmax(in[0], dim); }, {x}));
    // Non-contiguous input: the op sees a permuted view.
    EXPECT_TRUE(gradcheck([dim](const auto& in) { return softmax(in[0].permute({2, 0, 1}), dim); }, {x}));
    EXPECT_TRUE(gradcheck([dim](const auto& in) { return log_softmax(in[0].transpose(0, 2), dim); }, {x}));
  }
}

TEST(Softmax, GradcheckHarnessCatchesAWrongGradient) {
  // The harness must fail when autograd misses a path: detach() hides softmax's dependence on x.
  const Tensor x = random_tensor({2, 3}, 9);
  EXPECT_FALSE(gradcheck([](const auto& in) { return softmax(in[0].detach(), 1) + in[0]; }, {x}));
}

TEST(Softmax, SixteenBitRoundsOnceFromFp32) {
  // A 16-bit softmax computes in fp32 and rounds once: bit-identical to the f32 op on the widened input,
  // rounded at the end. Checked along the last dim (fast path) and a middle dim.
  for (DType dt : {kFloat16, kBFloat16}) {
    const Tensor x = random_tensor({8, 33, 5}, 4, dt, -6, 6);
    for (int64_t dim : {2, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(dim));
      const Tensor y = softmax(x, dim);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_TRUE(all_close(y, softmax(x.to(kFloat32), dim).to(dt), 0, 0));
      EXPECT_TRUE(all_close(log_softmax(x, dim), log_softmax(x.to(kFloat32), dim).to(dt), 0, 0));
    }
  }
}

TEST(Softmax, SixteenBitBackward) {
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_tensor({4, 7}, 5, dt).set_requires_grad(true);
    const Tensor g = random_tensor({4, 7}, 6, dt);
    softmax(x, 1).backward(g);
    EXPECT_EQ(x.grad().dtype(), dt);
    // Reference: the f64 gradient from the same 16-bit values; the 16-bit output y is rounded (bf16:
    // 2^-9 relative) before the backward uses it, so allow a few 16-bit ulps of the O(0.3) gradients.
    const Tensor x64 = x.detach().to(kFloat64).set_requires_grad(true);
    softmax(x64, 1).backward(g.to(kFloat64));
    const double tol = dt == kBFloat16 ? 2e-2 : 3e-3;
    EXPECT_TRUE(all_close(x.grad(), x64.grad(), tol, tol));
  }
}

TEST(Softmax, LargeInputsAreStable) {
  // Without max-subtraction exp(1000) overflows; with it the result is exact.
  const Tensor x = from_vector<float>({1000.f, 1001.f, 1002.f, -1000.f}, {1, 4});
  const std::vector<double> y = testing::values(softmax(x, 1));
  const double z = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(y[0], std::exp(-2.0) / z, 1e-6);
  EXPECT_NEAR(y[2], 1 / z, 1e-6);
  EXPECT_EQ(y[3], 0.0);
  const std::vector<double> ly = testing::values(log_softmax(x, 1));
  EXPECT_NEAR(ly[2], -std::log(z), 1e-5);
  EXPECT_NEAR(ly[3], -2002 - std::log(z), 1e-2);  // f32 spacing at 2000 is 1.2e-4
}

TEST(Softmax, MaskedEntries) {
  // -inf logits (attention masks) get probability 0 and the rest renormalise.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = from_vector<double>({0.0, -inf, std::log(3.0)}, {3});
  const std::vector<double> y = testing::values(softmax(x, 0));
  EXPECT_NEAR(y[0], 0.25, 1e-15);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_NEAR(y[2], 0.75, 1e-15);
}

TEST(Softmax, FastExpfAgreesWithStdExp) {
  // Every 97th float bit pattern in [-104, 89] plus the edges: within 2 ulp where the result is
  // normal, inf above the overflow threshold, nan for nan.
  int64_t checked = 0;
  for (uint32_t bits = 0; bits < 0xffffffffu - 97; bits += 97) {
    const float x = std::bit_cast<float>(bits);
    if (!(x >= -87.0f && x <= 88.7f)) continue;
    const float want = std::exp(x), got = cpu::fast_expf(x);
    const float ulp = std::nextafter(want, std::numeric_limits<float>::infinity()) - want;
    ASSERT_LE(std::abs(got - want), 2 * ulp) << "x = " << x;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
  EXPECT_EQ(cpu::fast_expf(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::fast_expf(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::fast_expf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::fast_expf(-200.0f), 0.0f);
  EXPECT_EQ(cpu::fast_expf(-104.5f), 0.0f);  // masked to 0 (no subnormal underflow on the way)
  EXPECT_FALSE(std::signbit(cpu::fast_expf(-std::numeric_limits<float>::infinity())));
  EXPECT_GT(cpu::fast_expf(-87.0f), 0.0f);
  EXPECT_EQ(cpu::fast_expf(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::fast_expf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Softmax, Errors) {
  const Tensor x = zeros({2, 3});
  const std::string bad_dim = testing::error_of([&] { softmax(x, 2); });
  EXPECT_NE(bad_dim.find("softmax: dim 2 is out of range"), std::string::npos) << bad_dim;
  const std::string bad_dtype = testing::error_of([&] { log_softmax(zeros({2}, {.dtype = kInt64}), 0); });
  EXPECT_NE(bad_dtype.find("log_softmax: expected a floating tensor"), std::string::npos) << bad_dtype;
  EXPECT_NE(bad_dtype.find("i64"), std::string::npos) << bad_dtype;
}

}  // namespace
}  // namespace mantissa
