// Elementwise ops' forward semantics in every floating dtype: 16-bit ops compute in fp32 and round once,
// overflow as on a GPU, type promotion, broadcasting, strided inputs, comparisons, where/masked_fill/clamp.
#include "ops/elementwise/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "ops/reduce/reduce.h"
#include "tests/ops/op_test_support.h"

namespace mantissa {
namespace {

using testing::values;

// Random f32 values in [lo, hi) already representable in `dt`, so the op's inputs are exact.
Tensor random_in(DType dt, int64_t n, double lo, double hi, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * g.uniform_double());
  return from_vector<float>(v, {n}).to(dt);
}

// The contract for 16-bit ops: compute in fp32 on the 16-bit inputs, round once to the output dtype. So
// the 16-bit result must equal the f32 op on the same (upcast) inputs, rounded to 16 bits: bit for bit.
void expect_rounded_once(const std::function<Tensor(const Tensor&, const Tensor&)>& op, double lo, double hi,
                         const char* name) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    const Tensor a = random_in(dt, 1000, lo, hi, 1), b = random_in(dt, 1000, lo, hi, 2);
    const Tensor got = op(a, b);
    ASSERT_EQ(got.dtype(), dt) << name;
    const Tensor want = op(a.to(DType::kF32), b.to(DType::kF32)).to(dt);
    const std::vector<double> g = values(got), w = values(want);
    int diff = 0;
    for (size_t i = 0; i < g.size(); ++i) diff += !(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])));
    EXPECT_EQ(diff, 0) << name << " in " << dtype_name(dt) << ": " << diff << " of 1000 differ from fp32-then-round";
  }
}

TEST(Elementwise, SixteenBitOpsComputeInFp32AndRoundOnce) {
  expect_rounded_once([](const Tensor& a, const Tensor& b) { return add(a, b); }, -100, 100, "add");
  expect_rounded_once([](const Tensor& a, const Tensor& b) { return sub(a, b); }, -100, 100, "sub");
  expect_rounded_once([](const Tensor& a, const Tensor& b) { return mul(a, b); }, -30, 30, "mul");
  expect_rounded_once([](const Tensor& a, const Tensor& b) { return div(a, b); }, 0.1, 30, "div");
  expect_rounded_once([](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.1, 4, "pow");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return exp(a); }, -10, 10, "exp");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return log(a); }, 0.01, 100, "log");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return sqrt(a); }, 0, 100, "sqrt");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return rsqrt(a); }, 0.01, 100, "rsqrt");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return tanh(a); }, -4, 4, "tanh");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return sigmoid(a); }, -10, 10, "sigmoid");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return silu(a); }, -10, 10, "silu");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return gelu(a); }, -5, 5, "gelu");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return gelu(a, GeluApproximation::kTanh); }, -5, 5,
                      "gelu_tanh");
  expect_rounded_once([](const Tensor& a, const Tensor&) { return mul(a, 0.1); }, -10, 10, "mul_scalar");
}

// A composite x * 0.1 + 1 in f16 rounds twice (after each op): that is the user's choice of two ops, and
// the intermediate is visibly f16.
TEST(Elementwise, EachOpRoundsItsOwnOutput) {
  const Tensor x = from_vector<float>({1.0f / 3.0f}).to(DType::kF16);
  const Tensor y = add(mul(x, 3.0), 0.0);
  EXPECT_EQ(mul(x, 3.0).dtype(), DType::kF16);
  EXPECT_EQ(values(y)[0], static_cast<double>(static_cast<float>(Half(static_cast<float>(Half(1.0f / 3.0f)) * 3.0f))));
}

TEST(Elementwise, OverflowBehavesAsOnAGpu) {
  const Tensor x16 = from_vector<float>({100.0f, 12.0f, 11.0f, -100.0f}).to(DType::kF16);
  const std::vector<double> e16 = values(exp(x16));
  EXPECT_TRUE(std::isinf(e16[0]) && e16[0] > 0) << "exp(100) in f16 is inf";
  EXPECT_TRUE(std::isinf(e16[1])) << "exp(12) = 162755 is above f16's max 65504";
  EXPECT_FALSE(std::isinf(e16[2])) << "exp(11) = 59874 fits";
  EXPECT_EQ(e16[3], 0.0) << "underflows to zero";
  // bf16 has f32's exponent range: exp(88) fits, exp(89) does not.
  const std::vector<double> eb = values(exp(from_vector<float>({88.0f, 89.0f}).to(DType::kBF16)));
  EXPECT_TRUE(std::isfinite(eb[0]));
  EXPECT_TRUE(std::isinf(eb[1]));
  // 60000 * 2 overflows f16 even though the math is done in fp32: the round at the output overflows.
  EXPECT_TRUE(std::isinf(values(mul(from_vector<float>({60000.0f}).to(DType::kF16), 2.0))[0]));
  // Division by zero is IEEE, not an error.
  const std::vector<double> d = values(div(from_vector<float>({1, -1, 0}), zeros({3})));
  EXPECT_TRUE(std::isinf(d[0]) && d[0] > 0);
  EXPECT_TRUE(std::isinf(d[1]) && d[1] < 0);
  EXPECT_TRUE(std::isnan(d[2]));
}

TEST(Elementwise, TypePromotion) {
  const Tensor h = ones({2}, {.dtype = DType::kF16}), b = ones({2}, {.dtype = DType::kBF16});
  const Tensor f = ones({2}), d = ones({2}, {.dtype = DType::kF64});
  EXPECT_EQ(add(h, b).dtype(), DType::kF32) << "f16 with bf16 gives f32";
  EXPECT_EQ(mul(h, f).dtype(), DType::kF32);
  EXPECT_EQ(sub(b, d).dtype(), DType::kF64);
  EXPECT_EQ(div(f, d).dtype(), DType::kF64);
  EXPECT_EQ(add(h, h).dtype(), DType::kF16);
  EXPECT_EQ(mul(h, 3.5).dtype(), DType::kF16) << "a scalar keeps the tensor's dtype";
  EXPECT_EQ(pow(b, 2.0).dtype(), DType::kBF16);
  EXPECT_EQ(where(gt(f, 0.0), h, d).dtype(), DType::kF64);
  EXPECT_EQ(add(f, arange(2.0)).dtype(), DType::kF32) << "floating beats integer";
}

// An f32 tensor with an f16/bf16 one of its shape (autocast's residual adds) reads the 16-bit operand in
// place, widened block by block: the same bits as casting it first; broadcast or strided pairs cast first.
TEST(Elementwise, MixedF32And16BitOperandsMatchCastingFirst) {
  Generator gen(12);
  const Tensor wide = randn({3, 1000}, {}, &gen);
  for (DType d : {DType::kF16, DType::kBF16}) {
    const Tensor narrow = randn({3, 1000}, {}, &gen).to(d);
    const Tensor cast = narrow.to(DType::kF32);
    const std::vector<std::pair<Tensor, Tensor>> pairs = {
        {add(wide, narrow), add(wide, cast)}, {add(narrow, wide), add(cast, wide)},
        {sub(narrow, wide), sub(cast, wide)}, {mul(wide, narrow), mul(wide, cast)},
        {div(wide, narrow), div(wide, cast)}, {sub(wide.t(), narrow.t()), sub(wide.t(), cast.t())}};
    for (const auto& [got, want] : pairs) {
      ASSERT_EQ(got.dtype(), DType::kF32);
      EXPECT_EQ(sum(ne(got, want).to(DType::kF32)).item(), 0.0) << dtype_name(d);
    }
    const Tensor bcast = ne(add(wide, narrow.select(0, 1)), add(wide, cast.select(0, 1)));  // broadcast: cast first
    EXPECT_EQ(sum(bcast.to(DType::kF32)).item(), 0.0);
  }
}

TEST(Elementwise, MixedDtypeGradientsComeBackInEachInputsDtype) {
  Tensor h = from_vector<float>({1, 2, 3}, {3}, {.dtype = DType::kF16}).set_requires_grad(true);
  Tensor f = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad(true);
  sum(mul(h, f)).backward();
  EXPECT_EQ(h.grad().dtype(), DType::kF16);
  EXPECT_EQ(f.grad().dtype(), DType::kF32);
  EXPECT_EQ(values(h.grad()), (std::vector<double>{5, 7, 9})) << "summed over the broadcast dim";
  EXPECT_EQ(values(f.grad()), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}

TEST(Elementwise, BroadcastingShapesAndValues) {
  const Tensor a = from_vector<double>({1, 2, 3}, {3, 1});
  const Tensor b = from_vector<double>({10, 20}, {2});
  const Tensor c = add(a, b);
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(values(c), (std::vector<double>{11, 21, 12, 22, 13, 23}));
  EXPECT_EQ(mul(scalar_tensor(2.0, {.dtype = DType::kF64}), a).shape(), (Shape{3, 1})) << "0-d broadcasts";
  EXPECT_EQ(add(zeros({2, 1, 4}), zeros({3, 1})).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(add(zeros({0, 3}), zeros({3})).shape(), (Shape{0, 3})) << "empty tensors broadcast too";
}

TEST(Elementwise, StridedAndLargeInputsMatchTheContiguousPath) {
  // Large enough for the multi-threaded flat loop (grain 32768), and the same data as a transposed view.
  const int64_t r = 300, c = 257;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const Tensor x = random_in(dt, r * c, -3, 3, 7).reshape({r, c});
    const Tensor y = random_in(dt, r * c, -3, 3, 8).reshape({r, c});
    const Tensor xt = x.t().contiguous().t(), yt = y.t().contiguous().t();  // same values, column-major
    ASSERT_FALSE(xt.is_contiguous());
    EXPECT_EQ(values(mul(x, y)), values(mul(xt, yt))) << dtype_name(dt);
    EXPECT_EQ(values(tanh(x)), values(tanh(xt))) << dtype_name(dt);
    // Every element checked against the scalar formula computed in the compute type.
    const std::vector<double> xv = values(x), yv = values(y), s = values(add(xt, yt));
    for (size_t i = 0; i < xv.size(); i += 97) {
      const double want =
          dt == DType::kF64 ? xv[i] + yv[i] : values(from_vector<float>({static_cast<float>(xv[i] + yv[i])}).to(dt))[0];
      ASSERT_EQ(s[i], want) << dtype_name(dt) << " element " << i;
    }
  }
}

TEST(Elementwise, ActivationValues) {
  const Tensor x = from_vector<double>({-3, -0.5, 0, 0.5, 3});
  const std::vector<double> r = values(relu(x)), g = values(gelu(x)), s = values(sigmoid(x));
  EXPECT_EQ(r, (std::vector<double>{0, 0, 0, 0.5, 3}));
  for (size_t i = 0; i < 5; ++i) {
    const double v = values(x)[i];
    EXPECT_NEAR(g[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-15);
    EXPECT_NEAR(s[i], 1 / (1 + std::exp(-v)), 1e-15);
  }
  // Saturation: no nan at the extremes.
  const std::vector<double> big = values(sigmoid(from_vector<float>({-200, 200})));
  EXPECT_EQ(big, (std::vector<double>{0, 1}));
  const std::vector<double> t = values(tanh(from_vector<float>({-50, 50})));
  EXPECT_EQ(t, (std::vector<double>{-1, 1}));
  EXPECT_EQ(values(abs(from_vector<double>({-2, 0, 3}))), (std::vector<double>{2, 0, 3}));
}

// SiLU and its gradient against a reference computed here in f64 with libm, element by element:
// silu(x) = x / (1 + e^-x) and silu'(x) = s (1 + x (1 - s)), s = 1 / (1 + e^-x). f64 agrees to a few ulp;
// f32 to 8 ulp of the f32 result (the CPU's vectorized exp is within 2 ulp of libm's, and a divide and a
// product follow), plus an absolute 1e-30 for results near zero, where a relative bound means nothing.
TEST(Elementwise, SiluAndItsGradientMatchAnF64Reference) {
  for (DType dt : {DType::kF64, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_in(DType::kF32, 2000, -20, 20, 11).to(dt).set_requires_grad(true);
    const Tensor y = silu(x);
    ASSERT_EQ(y.dtype(), dt);
    const Tensor g = random_in(DType::kF32, 2000, -2, 2, 12).to(dt);
    const Tensor dx = grad(y, {x}, {.grad_outputs = {g}})[0];
    const std::vector<double> xv = values(x), yv = values(y), gv = values(g), dxv = values(dx);
    const double rel = dt == DType::kF64 ? 8 * std::numeric_limits<double>::epsilon()
                                         : 8 * static_cast<double>(std::numeric_limits<float>::epsilon());
    for (size_t i = 0; i < xv.size(); ++i) {
      const double s = 1 / (1 + std::exp(-xv[i]));
      const double want = xv[i] * s, want_dx = gv[i] * s * (1 + xv[i] * (1 - s));
      ASSERT_NEAR(yv[i], want, rel * std::abs(want) + 1e-30) << "x = " << xv[i];
      ASSERT_NEAR(dxv[i], want_dx, rel * (std::abs(gv[i] * s) + std::abs(want_dx)) + 1e-30) << "x = " << xv[i];
    }
  }
  // The ends saturate to 0 and x without NaN (PyTorch's form gives NaN only at -inf).
  const std::vector<double> ends = values(silu(from_vector<float>({-200, 200})));
  EXPECT_EQ(ends[0], 0.0);
  EXPECT_EQ(ends[1], 200.0);
  EXPECT_TRUE(std::isnan(values(silu(from_vector<float>({-std::numeric_limits<float>::infinity()})))[0]));
}

TEST(Elementwise, ComparisonsReturnBool) {
  const Tensor a = from_vector<float>({1, 2, 3}), b = from_vector<double>({3, 2, 1});
  const Tensor lt_ab = lt(a, b);
  EXPECT_EQ(lt_ab.dtype(), DType::kBool);
  EXPECT_FALSE(lt_ab.requires_grad());
  auto bools = [](const Tensor& t) { return std::vector<bool>(t.data<bool>(), t.data<bool>() + t.numel()); };
  EXPECT_EQ(bools(lt_ab), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(bools(le(a, b)), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(bools(eq(a, b)), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(bools(ne(a, b)), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(bools(gt(a, 1.5)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(bools(ge(a, 2.0)), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(gt(zeros({2, 1}), zeros({3})).shape(), (Shape{2, 3}));
  const Tensor n = from_vector<float>({NAN});
  EXPECT_FALSE(bools(eq(n, n))[0]) << "nan is unequal to itself";
  EXPECT_TRUE(bools(ne(n, n))[0]);
}

TEST(Elementwise, WhereMaskedFillClamp) {
  const Tensor cond = gt(from_vector<double>({1, -1, 1}), 0.0);
  EXPECT_EQ(values(where(cond, from_vector<double>({1, 2, 3}), scalar_tensor(0, {.dtype = DType::kF64}))),
            (std::vector<double>{1, 0, 3}));
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(values(masked_fill(x, cond, -1.0)), (std::vector<double>{-1, 2, -1, -1, 5, -1})) << "mask broadcasts";
  const Tensor v = from_vector<float>({-2, -0.5f, 0.5f, 2, NAN});
  const std::vector<double> cl = values(clamp(v, -1.0, 1.0));
  EXPECT_EQ(std::vector<double>(cl.begin(), cl.end() - 1), (std::vector<double>{-1, -0.5, 0.5, 1}));
  EXPECT_TRUE(std::isnan(cl.back())) << "clamp keeps nan, as PyTorch does";
  EXPECT_EQ(values(clamp(v, 0.0, std::nullopt))[0], 0.0);
  EXPECT_EQ(values(clamp(v, std::nullopt, 0.0))[3], 0.0);
  // masked_fill in f16 rounds the fill value like the tensor's values.
  EXPECT_EQ(values(masked_fill(ones({1}, {.dtype = DType::kF16}), gt(ones({1}), 0.0), 0.1))[0],
            static_cast<double>(static_cast<float>(Half(0.1f))));
}

TEST(Elementwise, WhereContiguousRowsMatchTheStridedWalkForEveryElementSize) {
  // Contiguous out and cond with contiguous or scalar values take a bit-mask select; a transposed cond
  // takes the generic strided loop. Both must pick the same elements for 1-, 2-, 4- and 8-byte types
  // (bool, f16, bf16, f32, i64, f64), with nan and -inf values carried bit for bit.
  Generator g(5);
  std::vector<double> cv(7 * 45), av(7 * 45), bv(7 * 45);
  for (size_t i = 0; i < cv.size(); ++i) {
    cv[i] = g.uniform_double() - 0.5;
    av[i] = i % 11 == 0 ? NAN : std::floor(g.uniform_double() * 200 - 100);
    bv[i] = i % 13 == 0 ? -INFINITY : std::floor(g.uniform_double() * 200 - 100);
  }
  const Tensor cond = gt(from_vector<double>(cv, {7, 45}), 0.0);
  const Tensor cond_t = cond.transpose(0, 1).contiguous().transpose(0, 1);  // same values, strided
  ASSERT_FALSE(cond_t.is_contiguous());
  auto same = [](const Tensor& x, const Tensor& y) {
    const std::vector<double> a = values(x), b = values(y);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << i << ": " << a[i] << " vs " << b[i];
    }
  };
  const Tensor a64 = from_vector<double>(av, {7, 45}), b64 = from_vector<double>(bv, {7, 45});
  for (DType dt : {DType::kBool, DType::kF16, DType::kBF16, DType::kF32, DType::kI64, DType::kF64}) {
    Tensor x = a64.to(dt == DType::kBool || dt == DType::kI64 ? DType::kF64 : dt), y = b64;
    if (dt == DType::kBool) {
      x = gt(a64, 0.0);
      y = lt(b64, 0.0);
    } else if (dt == DType::kI64) {
      x = where(ne(a64, a64), zeros({}, {.dtype = DType::kF64}), a64).to(DType::kI64);  // ints have no nan
      y = where(eq(b64, -INFINITY), zeros({}, {.dtype = DType::kF64}), b64).to(DType::kI64);
    } else {
      y = b64.to(dt);
    }
    ASSERT_EQ(x.dtype(), dt);
    const Tensor zero = zeros({}, {.dtype = dt});
    same(where(cond, x, y), where(cond_t, x, y));
    same(where(cond, x, zero), where(cond_t, x, zero));
    same(where(cond, zero, y), where(cond_t, zero, y));
    if (is_floating(dt)) same(masked_fill(x, cond, -7.0), masked_fill(x, cond_t, -7.0));
  }
}

TEST(Elementwise, ClampAndWhereGradientsAtTheEdges) {
  Tensor x = from_vector<double>({-1, 0, 1, 2}).set_requires_grad(true);
  sum(clamp(x, 0.0, 1.0)).backward();
  // PyTorch passes the gradient where min <= x <= max, bounds included.
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 1, 0}));
  Tensor y = from_vector<double>({0, 4}).set_requires_grad(true);
  sum(pow(y, 2.0)).backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{0, 8}));
  Tensor base = from_vector<double>({0, 2}).set_requires_grad(true);
  Tensor e = from_vector<double>({2, 3}).set_requires_grad(true);
  sum(pow(base, e)).backward();
  const std::vector<double> ge = values(e.grad());
  EXPECT_EQ(ge[0], 0.0) << "d(0^e)/de is taken as 0, not nan (0 * log 0)";
  EXPECT_NEAR(ge[1], 8 * std::log(2.0), 1e-12);
}

}  // namespace
}  // namespace mantissa

namespace mantissa {
namespace {

TEST(Elementwise, ReluPassesNaNThroughAsPyTorch) {
  // torch.relu(nan) is nan: a NaN activation must reach the loss so that the GradScaler sees it.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64}) {
    const Tensor y = relu(from_vector<float>({nan, -1.0f, 2.0f, inf, -inf}).to(dtype)).to(DType::kF32);
    const float* p = y.data<float>();
    EXPECT_TRUE(std::isnan(p[0])) << dtype_name(dtype);
    EXPECT_EQ(p[1], 0.0f);
    EXPECT_EQ(p[2], 2.0f);
    EXPECT_EQ(p[3], inf);
    EXPECT_EQ(p[4], 0.0f);
  }
}

}  // namespace
}  // namespace mantissa
