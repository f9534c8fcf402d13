// rand, randn, uniform_ and normal_ (framework/random.h): determinism for a seed, saving and restoring a
// Generator's state, row-major order on strided tensors, ranges and moments, the once-rounded 16-bit
// dtypes, and the misuse errors.
#include "framework/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "ops/elementwise/elementwise.h"

namespace mantissa {
namespace {

const DType kFloatingDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

// The tensor's values in row-major order, as doubles.
std::vector<double> values(const Tensor& t) {
  const Tensor c = t.contiguous().to(DType::kF64);
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// Bitwise equality of two tensors of one dtype (nan-free here).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

TEST(Random, SameSeedSameValuesInEveryDtype) {
  for (DType dt : kFloatingDTypes) {
    Generator g1(42), g2(42), g3(43);
    const Tensor a = rand({5, 7}, {.dtype = dt}, &g1);
    const Tensor b = rand({5, 7}, {.dtype = dt}, &g2);
    const Tensor c = rand({5, 7}, {.dtype = dt}, &g3);
    EXPECT_EQ(a.dtype(), dt);
    EXPECT_EQ(a.shape(), (Shape{5, 7}));
    EXPECT_TRUE(same_bits(a, b)) << dtype_name(dt);
    EXPECT_FALSE(same_bits(a, c)) << dtype_name(dt);
    const Tensor n1 = randn({33}, {.dtype = dt}, &g1);
    const Tensor n2 = randn({33}, {.dtype = dt}, &g2);
    EXPECT_TRUE(same_bits(n1, n2)) << dtype_name(dt);
  }
}

TEST(Random, NullGeneratorUsesTheDefaultOne) {
  manual_seed(1234);
  const Tensor a = randn({16});
  const Tensor b = rand({16});
  Generator g(1234);
  EXPECT_TRUE(same_bits(a, randn({16}, {}, &g)));
  EXPECT_TRUE(same_bits(b, rand({16}, {}, &g)));
  EXPECT_EQ(default_generator().state(), g.state());
}

// rand in f32 is the Generator's uniform_float stream, one word per element; f64 uses uniform_double.
TEST(Random, ValuesComeFromTheGeneratorStream) {
  Generator g(9), h(9);
  const std::vector<double> f = values(rand({6}, {}, &g));
  for (double v : f) EXPECT_EQ(v, static_cast<double>(h.uniform_float()));
  const std::vector<double> d = values(rand({3}, {.dtype = DType::kF64}, &g));
  for (double v : d) EXPECT_EQ(v, h.uniform_double());
  const std::vector<double> n = values(randn({3}, {.dtype = DType::kF64}, &g));
  for (double v : n) EXPECT_EQ(v, h.normal());
  EXPECT_EQ(g.state(), h.state());
}

TEST(Random, StateSaveAndRestoreReproducesTheStream) {
  Generator g(77);
  g.next_u32();  // leave the state in the middle of a Philox block
  const GeneratorState saved = g.state();
  const Tensor a = randn({5, 3}, {}, &g);
  const Tensor b = rand({4}, {.dtype = DType::kBF16}, &g);
  g.set_state(saved);
  EXPECT_TRUE(same_bits(a, randn({5, 3}, {}, &g)));
  EXPECT_TRUE(same_bits(b, rand({4}, {.dtype = DType::kBF16}, &g)));
  // A different generator given the saved state continues the same way.
  Generator other(1);
  other.set_state(saved);
  EXPECT_TRUE(same_bits(a, randn({5, 3}, {}, &other)));
  // The default generator too.
  default_generator().set_state(saved);
  EXPECT_TRUE(same_bits(a, randn({5, 3})));
}

// A strided tensor gets the values a contiguous one of its shape would, in row-major order.
TEST(Random, StridedTensorsFillInRowMajorOrder) {
  Generator g1(5), g2(5);
  const Tensor base = zeros({4, 6});
  const Tensor view = base.t().slice(0, 1, 5);  // [4, 4], strides [1, 6], offset 1
  ASSERT_FALSE(view.is_contiguous());
  normal_(view, 2.0, 3.0, &g1);
  const Tensor want = empty({4, 4});
  normal_(want, 2.0, 3.0, &g2);
  EXPECT_EQ(values(view), values(want));
  // Column 0 of `base` (row 0 of the transposed view) was outside the slice and stays zero.
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(base.data<float>()[r * 6], 0.0f);
}

// rand is in [0, 1) in every dtype, even where rounding to 16 bits would reach 1 (bf16 rounds about one
// f32 draw in 512 up to 1.0). Mean and variance of U[0,1) are 1/2 and 1/12; with n = 200,000 the
// standard error of the mean is 0.00065, so 0.005 is more than 7 standard errors.
TEST(Random, RandIsInZeroOneWithUniformMoments) {
  for (DType dt : kFloatingDTypes) {
    Generator g(3);
    const std::vector<double> v = values(rand({200000}, {.dtype = dt}, &g));
    double sum = 0, sq = 0;
    for (double x : v) {
      ASSERT_GE(x, 0.0) << dtype_name(dt);
      ASSERT_LT(x, 1.0) << dtype_name(dt);
      sum += x;
      sq += x * x;
    }
    const double mean = sum / static_cast<double>(v.size());
    const double var = sq / static_cast<double>(v.size()) - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.005) << dtype_name(dt);
    EXPECT_NEAR(var, 1.0 / 12.0, 0.002) << dtype_name(dt);  // var's standard error is about 0.0002
  }
}

TEST(Random, UniformRespectsItsBounds) {
  for (DType dt : kFloatingDTypes) {
    Generator g(8);
    const Tensor t = empty({50000}, {.dtype = dt});
    uniform_(t, -3.0, -1.0, &g);
    double lo = 0, hi = -10;
    for (double x : values(t)) {
      ASSERT_GE(x, -3.0);
      ASSERT_LT(x, -1.0);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    EXPECT_LT(lo, -2.99) << "the whole range should be covered";
    EXPECT_GT(hi, -1.01);
    uniform_(t, 2.5, 2.5, &g);  // an empty range gives low
    for (double x : values(t)) ASSERT_EQ(x, 2.5);
  }
}

// N(mean, stddev^2) moments; with n = 200,000 the mean's standard error is stddev / 447, so the
// bounds below are about 9 standard errors (and the 16-bit rounding adds at most 2^-9 relative).
TEST(Random, NormalHasTheRightMoments) {
  for (DType dt : kFloatingDTypes) {
    Generator g(21);
    const Tensor t = empty({200000}, {.dtype = dt});
    normal_(t, 1.5, 2.0, &g);
    double sum = 0, sq = 0;
    for (double x : values(t)) {
      sum += x;
      sq += x * x;
    }
    const double mean = sum / 200000.0;
    const double stddev = std::sqrt(sq / 200000.0 - mean * mean);
    EXPECT_NEAR(mean, 1.5, 0.04) << dtype_name(dt);
    EXPECT_NEAR(stddev, 2.0, 0.03) << dtype_name(dt);
  }
  const Tensor z = randn({1000});
  normal_(z, 4.0, 0.0);  // stddev 0 gives the mean exactly
  for (double x : values(z)) ASSERT_EQ(x, 4.0);
}

// 16-bit fills compute in f32 and round once: the same stream in f32, then to(), gives the same bits.
TEST(Random, SixteenBitFillsRoundTheF32ValueOnce) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Generator g1(13), g2(13);
    const Tensor n16 = empty({4096}, {.dtype = dt});
    normal_(n16, 0.25, 3.0, &g1);
    const Tensor n32 = empty({4096});
    normal_(n32, 0.25, 3.0, &g2);
    EXPECT_TRUE(same_bits(n16, n32.to(dt))) << dtype_name(dt);

    // uniform: the same, except that a value rounding up to `high` is replaced by the largest below it.
    const Tensor u16 = empty({20000}, {.dtype = dt});
    uniform_(u16, 0.0, 1.0, &g1);
    const Tensor u32 = empty({20000});
    uniform_(u32, 0.0, 1.0, &g2);
    const std::vector<double> got = values(u16), want = values(u32.to(dt));
    const double largest_below_one = dt == DType::kF16 ? 1.0 - std::ldexp(1.0, -11) : 1.0 - std::ldexp(1.0, -8);
    int64_t replaced = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (want[i] == 1.0) {
        ++replaced;
        EXPECT_EQ(got[i], largest_below_one);
      } else {
        EXPECT_EQ(got[i], want[i]);
      }
    }
    if (dt == DType::kBF16) {
      EXPECT_GT(replaced, 0) << "bf16 should have needed the replacement";
    }
  }
}

TEST(Random, RequiresGradOptionMakesALeaf) {
  const Tensor t = randn({3}, {.requires_grad = true});
  EXPECT_TRUE(t.requires_grad());
  EXPECT_TRUE(t.is_leaf());
  uniform_(t, 0.0, 1.0);  // refilling a leaf in place is allowed (module initialisation does it)
  const Tensor y = t * 2.0;
  {
    NoGradGuard no_grad;
    normal_(y, 0.0, 1.0);  // without grad mode a graph tensor may be overwritten
  }
}

TEST(Random, MisuseIsReported) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message([] { rand({2}, {.dtype = DType::kI64}); }).find("rand: expected a floating dtype, got i64"),
            std::string::npos);
  EXPECT_NE(message([] { uniform_(zeros({2}, {.dtype = DType::kI32}), 0, 1); }).find("uniform_: expected a floating"),
            std::string::npos);
  EXPECT_NE(message([] { uniform_(zeros({2}), 1, 0); }).find("uniform_: expected finite low <= high"),
            std::string::npos);
  EXPECT_NE(message([] { normal_(zeros({2}), 0, -1); }).find("stddev >= 0"), std::string::npos);
  EXPECT_NE(message([] {
              normal_(zeros({1, 3}).expand({4, 3}), 0, 1);
            }).find("several elements in one memory"),
            std::string::npos);
  EXPECT_NE(message([] {
              const Tensor x = ones({2}, {.requires_grad = true});
              normal_(x * 3.0, 0, 1);
            }).find("computed by a differentiable op"),
            std::string::npos);
  EXPECT_NE(message([] { uniform_(Tensor(), 0, 1); }).find("undefined"), std::string::npos);
}

}  // namespace
}  // namespace mantissa
