// FP8 ops on the CPU (ops/fp8/fp8.h). quantize_fp8: every element's bits equal the scalar cast of
// framework/float8.h (checked against PyTorch bit for bit in tests/framework) of x * scale, for f32, f16 and
// bf16 inputs, strided ones, both formats and both overflow rules; amax and overflow counts against
// references computed here element by element. scaled_mm: bit for bit the decoded operands' bf16 GEMM into
// f32 followed by the epilogue (tests/support/scaled_mm_reference.h). Argument errors, and the LinearOverride hook of
// ops::linear with a fake override.
#include "ops/fp8/fp8.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "amp/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "tests/ops/nn_testing.h"
#include "tests/support/scaled_mm_reference.h"

namespace mantissa {
namespace {

using testing::all_close;
using testing::error_of;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

const uint8_t* bytes(const Tensor& t) { return static_cast<const uint8_t*>(t.data_ptr()); }

// Values spread over many binades (so that a scale pushes some past the FP8 maximum and others into its
// subnormals), with signs, zeros and the special values at fixed places.
std::vector<float> spread_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-24, 18), sign(0, 1);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = std::ldexp(mant(gen), exp(gen)) * (sign(gen) ? -1.0f : 1.0f);
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, 448.0f, 464.0f, 57344.0f, 61440.0f, 1e-30f};
  for (size_t i = 0; i < std::size(specials) && i * 997 < v.size(); ++i) v[i * 997] = specials[i];
  return v;
}

// The scalar reference: one element's FP8 bits, and whether it overflows, defined by the non-saturating cast
// (it gives inf in E5M2, nan in E4M3, exactly for the values that overflow) for a non-nan value.
uint8_t reference_bits(DType fp8, float y, Fp8Overflow overflow) {
  return fp8 == DType::kF8E4M3 ? Float8E4M3(y, overflow).bits : Float8E5M2(y, overflow).bits;
}
bool reference_overflows(DType fp8, float y) {
  if (std::isnan(y)) return false;
  const float nosat = fp8 == DType::kF8E4M3 ? static_cast<float>(Float8E4M3(y, Fp8Overflow::kNoSaturate))
                                            : static_cast<float>(Float8E5M2(y, Fp8Overflow::kNoSaturate));
  return std::isnan(nosat) || std::isinf(nosat);
}

// Checks q against the element-by-element reference for x (any dtype, any strides) and scale.
void expect_quantized(const Tensor& x, float scale, DType fp8, Fp8Overflow overflow, const Fp8Quantized& q) {
  const Tensor xf = x.to(DType::kF32).contiguous();  // exact: f16/bf16 widen exactly
  ASSERT_EQ(q.data.dtype(), fp8);
  ASSERT_EQ(q.data.shape(), x.shape());
  ASSERT_TRUE(q.data.is_contiguous());
  const float* xv = xf.data<float>();
  const uint8_t* got = bytes(q.data);
  int64_t overflows = 0, mismatches = 0, first_mismatch = -1;
  float amax = 0.0f;
  bool saw_nan = false;
  for (int64_t i = 0; i < xf.numel(); ++i) {
    const float y = xv[i] * scale;
    if (got[i] != reference_bits(fp8, y, overflow) && mismatches++ == 0) first_mismatch = i;
    overflows += reference_overflows(fp8, y) ? 1 : 0;
    saw_nan = saw_nan || std::isnan(xv[i]);
    amax = std::max(amax, std::abs(xv[i]));
  }
  EXPECT_EQ(mismatches, 0) << "first at " << first_mismatch << ": x " << (first_mismatch >= 0 ? xv[first_mismatch] : 0)
                           << " got 0x" << std::hex << (first_mismatch >= 0 ? int{got[first_mismatch]} : 0);
  EXPECT_EQ(q.overflow.dtype(), DType::kI64);
  EXPECT_EQ(q.overflow.dim(), 0);
  EXPECT_EQ(q.overflow.item<int64_t>(), overflows);
  EXPECT_EQ(q.amax.dtype(), DType::kF32);
  EXPECT_EQ(q.amax.dim(), 0);
  if (saw_nan) {
    EXPECT_TRUE(std::isnan(q.amax.item<float>()));
  } else {
    EXPECT_EQ(q.amax.item<float>(), amax);
  }
}

TEST(QuantizeFp8, BitsEqualTheScalarCastForEveryInputDtypeFormatAndOverflowRule) {
  // 70,000 elements: several threads' chunks and many blocks, with a partial last block.
  const std::vector<float> v = spread_values(70001, 1);
  const Tensor x32 = from_vector<float>(v, {70001});
  for (DType in : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor x = x32.to(in);
    for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
      for (Fp8Overflow overflow : {Fp8Overflow::kSaturate, Fp8Overflow::kNoSaturate}) {
        for (float scale : {1.0f, 3.7f, 1.0f / 1024.0f}) {
          SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + std::string(dtype_name(fp8)) +
                       (overflow == Fp8Overflow::kSaturate ? " saturating" : " not saturating") + ", scale " +
                       std::to_string(scale));
          expect_quantized(x, scale, fp8, overflow, quantize_fp8(x, scalar_tensor(scale), fp8, overflow));
        }
      }
    }
  }
}

TEST(QuantizeFp8, StridedInputsQuantizeTheirLogicalElements) {
  const Tensor base = from_vector<float>(spread_values(40 * 30, 2), {40, 30});
  for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tensor b = base.to(in);
    for (const Tensor& x : {b.t(), b.slice(0, 1, 40, 3).slice(1, 2, 30, 2), b.select(1, 7)}) {
      ASSERT_FALSE(x.is_contiguous());
      const Fp8Quantized q = quantize_fp8(x, scalar_tensor(16.0), DType::kF8E4M3, Fp8Overflow::kSaturate);
      expect_quantized(x, 16.0f, DType::kF8E4M3, Fp8Overflow::kSaturate, q);
    }
  }
}

TEST(QuantizeFp8, OverflowAtTheFormatsBoundaries) {
  const float after_464 = std::nextafter(464.0f, kInf), before_61440 = std::nextafter(61440.0f, 0.0f);
  // E4M3: 464 is the midpoint between 448 (the maximum) and 480, and rounds to even: down, to 448. Any
  // value above it overflows, as do infinities; nan does not count.
  const Tensor e4 = from_vector<float>({448.0f, 464.0f, after_464, 500.0f, -1000.0f, kInf, -kInf, kNan, 0.0f});
  const Fp8Quantized s4 = quantize_fp8(e4, scalar_tensor(1.0), DType::kF8E4M3, Fp8Overflow::kSaturate);
  const Fp8Quantized n4 = quantize_fp8(e4, scalar_tensor(1.0), DType::kF8E4M3, Fp8Overflow::kNoSaturate);
  EXPECT_EQ(s4.overflow.item<int64_t>(), 5);
  EXPECT_EQ(n4.overflow.item<int64_t>(), 5);
  const std::vector<uint8_t> sat4 = {0x7e, 0x7e, 0x7e, 0x7e, 0xfe, 0x7e, 0xfe, 0x7f, 0x00};    // +-448, nan, 0
  const std::vector<uint8_t> nosat4 = {0x7e, 0x7e, 0x7f, 0x7f, 0xff, 0x7f, 0xff, 0x7f, 0x00};  // overflow -> nan
  EXPECT_EQ(std::vector<uint8_t>(bytes(s4.data), bytes(s4.data) + 9), sat4);
  EXPECT_EQ(std::vector<uint8_t>(bytes(n4.data), bytes(n4.data) + 9), nosat4);
  EXPECT_TRUE(std::isnan(s4.amax.item<float>()));

  // E5M2: 61440 is the midpoint between 57344 (the maximum) and 65536, and rounds to even: up, so it
  // overflows; the float below it does not.
  const Tensor e5 = from_vector<float>({57344.0f, before_61440, 61440.0f, -1e5f, kInf, 2.0f});
  const Fp8Quantized s5 = quantize_fp8(e5, scalar_tensor(1.0), DType::kF8E5M2, Fp8Overflow::kSaturate);
  const Fp8Quantized n5 = quantize_fp8(e5, scalar_tensor(1.0), DType::kF8E5M2, Fp8Overflow::kNoSaturate);
  EXPECT_EQ(s5.overflow.item<int64_t>(), 3);
  EXPECT_EQ(n5.overflow.item<int64_t>(), 3);
  const std::vector<uint8_t> sat5 = {0x7b, 0x7b, 0x7b, 0xfb, 0x7b, 0x40};    // +-57344, 2
  const std::vector<uint8_t> nosat5 = {0x7b, 0x7b, 0x7c, 0xfc, 0x7c, 0x40};  // overflow -> +-inf
  EXPECT_EQ(std::vector<uint8_t>(bytes(s5.data), bytes(s5.data) + 6), sat5);
  EXPECT_EQ(std::vector<uint8_t>(bytes(n5.data), bytes(n5.data) + 6), nosat5);
  EXPECT_EQ(s5.amax.item<float>(), kInf);

  // The scale decides: 100 is fine at scale 4 (400) and overflows E4M3 at scale 5 (500).
  const Tensor hundred = full({3}, 100.0);
  EXPECT_EQ(quantize_fp8(hundred, scalar_tensor(4.0), DType::kF8E4M3, Fp8Overflow::kSaturate).overflow.item<int64_t>(),
            0);
  EXPECT_EQ(quantize_fp8(hundred, scalar_tensor(5.0), DType::kF8E4M3, Fp8Overflow::kSaturate).overflow.item<int64_t>(),
            3);
}

TEST(Amax, MaxMagnitudeWithNanAndInfinityAndEmpty) {
  for (DType in : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(in));
    EXPECT_EQ(amax(from_vector<float>({1.0f, -5.0f, 3.0f, -0.0f}).to(in)).item<float>(), 5.0f);
    EXPECT_EQ(amax(from_vector<float>({1.0f, -kInf, 3.0f}).to(in)).item<float>(), kInf);
    EXPECT_EQ(amax(empty({0, 3}, {.dtype = in})).item<float>(), 0.0f);
    EXPECT_EQ(amax(zeros({}, {.dtype = in})).item<float>(), 0.0f);
    // A nan anywhere (first, inside a later thread's chunk, last) wins over inf.
    for (int64_t at : {int64_t{0}, int64_t{50000}, int64_t{69999}}) {
      std::vector<float> v = spread_values(70000, 3);
      v[static_cast<size_t>(at)] = kNan;
      v[10] = -kInf;
      const Tensor x = from_vector<float>(v, {70000}).to(in);
      EXPECT_TRUE(std::isnan(amax(x).item<float>())) << "nan at " << at;
      EXPECT_TRUE(
          std::isnan(quantize_fp8(x, scalar_tensor(1.0), DType::kF8E5M2, Fp8Overflow::kSaturate).amax.item<float>()));
    }
  }
  // Strided, and equal to quantize_fp8's amax.
  const Tensor x = from_vector<float>(spread_values(64 * 50, 4), {64, 50}).t();
  const float expected = max(abs(x)).item<float>();
  EXPECT_EQ(amax(x).item<float>(), expected);
  EXPECT_EQ(quantize_fp8(x, scalar_tensor(0.5), DType::kF8E4M3, Fp8Overflow::kSaturate).amax.item<float>(), expected);
  const Fp8Quantized empty_q = quantize_fp8(empty({0}), scalar_tensor(1.0), DType::kF8E4M3, Fp8Overflow::kSaturate);
  EXPECT_EQ(empty_q.data.numel(), 0);
  EXPECT_EQ(empty_q.amax.item<float>(), 0.0f);
  EXPECT_EQ(empty_q.overflow.item<int64_t>(), 0);
}

TEST(QuantizeFp8, ResultsCarryNoHistory) {
  Tensor x = from_vector<float>({1.0f, 2.0f});
  x.set_requires_grad(true);
  const Fp8Quantized q = quantize_fp8(x, scalar_tensor(1.0), DType::kF8E4M3, Fp8Overflow::kSaturate);
  EXPECT_FALSE(q.data.requires_grad());
  EXPECT_FALSE(q.amax.requires_grad());
  EXPECT_FALSE(amax(x).requires_grad());
}

TEST(QuantizeFp8, Errors) {
  const Tensor x = ones({2, 3}), s = scalar_tensor(1.0);
  const auto q = [](const Tensor& x, const Tensor& s, DType fp8) {
    return [=] { quantize_fp8(x, s, fp8, Fp8Overflow::kSaturate); };
  };
  EXPECT_THAT(error_of(q(ones({2}, {.dtype = kFloat64}), s, kFloat8E4M3)),
              HasSubstr("quantize_fp8: expected an f32, f16 or bf16 input, got f64 [2]"));
  EXPECT_THAT(error_of(q(ones({2}, {.dtype = kInt64}), s, kFloat8E4M3)), HasSubstr("got i64 [2]"));
  EXPECT_THAT(error_of(q(x.to(kFloat8E4M3), s, kFloat8E4M3)), HasSubstr("it is quantized already"));
  EXPECT_THAT(error_of(q(Tensor(), s, kFloat8E4M3)), HasSubstr("quantize_fp8: the input is an undefined tensor"));
  EXPECT_THAT(error_of(q(x, s, kBFloat16)),
              HasSubstr("quantize_fp8: expected an FP8 target dtype (kF8E4M3 or kF8E5M2), got bf16"));
  EXPECT_THAT(error_of(q(x, ones({1}), kFloat8E4M3)),
              HasSubstr("quantize_fp8: expected scale to be a 0-d f32 tensor (one per-tensor factor), got f32 [1]"));
  EXPECT_THAT(error_of(q(x, scalar_tensor(1.0, {.dtype = kFloat64}), kFloat8E5M2)), HasSubstr("got f64 []"));
  EXPECT_THAT(error_of(q(x, Tensor(), kFloat8E5M2)), HasSubstr("quantize_fp8: scale is an undefined tensor"));
  EXPECT_THAT(error_of([] { amax(ones({2}, {.dtype = kInt32})); }),
              HasSubstr("amax: expected an f32, f16 or bf16 input, got i32 [2]"));
}

// ---- scaled_mm ----

// A [rows, cols] FP8 tensor with the bits of quantizing spread-out values at `scale`.
Tensor random_fp8(int64_t rows, int64_t cols, DType fp8, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = dist(gen);
  return quantize_fp8(from_vector<float>(v, {rows, cols}), scalar_tensor(scale), fp8, Fp8Overflow::kSaturate).data;
}

// Equal bits (nan patterns included), for any dtype.
void expect_same_bits(const Tensor& expected, const Tensor& actual) {
  ASSERT_EQ(expected.shape(), actual.shape());
  ASSERT_EQ(expected.dtype(), actual.dtype());
  ASSERT_TRUE(actual.is_contiguous());
  const Tensor e = expected.contiguous();
  const size_t nbytes = static_cast<size_t>(e.numel()) * element_size(e.dtype());
  const std::vector<uint8_t> eb(bytes(e), bytes(e) + nbytes), ab(bytes(actual), bytes(actual) + nbytes);
  EXPECT_TRUE(eb == ab) << "max |diff| " << max(abs(sub(expected.to(kFloat32), actual.to(kFloat32)))).item<float>();
}

TEST(ScaledMm, EqualsDecodeThenBf16GemmThenEpilogueBitForBit) {
  struct Case {
    int64_t m, k, n;
  };
  const float sa = 0.125f, sb = 1.0f / 3.0f;
  for (const Case& c : {Case{5, 7, 3}, Case{64, 48, 32}, Case{33, 129, 17}}) {
    for (auto [fa, fb] : {std::pair{kFloat8E4M3, kFloat8E4M3}, std::pair{kFloat8E5M2, kFloat8E4M3},
                          std::pair{kFloat8E4M3, kFloat8E5M2}}) {
      const Tensor a = random_fp8(c.m, c.k, fa, 11, 8.0f);
      const Tensor w = random_fp8(c.n, c.k, fb, 12, 16.0f);  // a linear's weight [out, in]
      const Tensor b = random_fp8(c.k, c.n, fb, 13, 16.0f);
      const Tensor bias32 = mul(from_vector<float>(spread_values(c.n, 14), {c.n}), 1e-6);
      for (DType out_dtype : {kFloat32, kBFloat16, kFloat16}) {
        for (const Tensor& bias : {Tensor(), bias32, bias32.to(out_dtype)}) {
          SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n) + " " +
                       std::string(dtype_name(fa)) + " x " + std::string(dtype_name(fb)) + " -> " +
                       std::string(dtype_name(out_dtype)) + (bias.defined() ? " bias " : " no bias ") +
                       (bias.defined() ? std::string(dtype_name(bias.dtype())) : ""));
          const Tensor sa_t = scalar_tensor(sa), sb_t = scalar_tensor(sb);
          // a @ b, both row-major.
          expect_same_bits(testing::scaled_mm_reference(a.to(kFloat32), b.to(kFloat32), sa, sb, out_dtype, bias),
                           scaled_mm(a, b, sa_t, sb_t, out_dtype, bias));
          // The forward of a linear: x @ w^T, the weight a transposed view.
          expect_same_bits(testing::scaled_mm_reference(a.to(kFloat32), w.to(kFloat32).t(), sa, sb, out_dtype, bias),
                           scaled_mm(a, w.t(), sa_t, sb_t, out_dtype, bias));
        }
      }
    }
  }
}

TEST(ScaledMm, TransposedAndStridedOperands) {
  const float sa = 2.0f, sb = 0.25f;
  const Tensor g = random_fp8(24, 40, kFloat8E5M2, 21, 4.0f);  // a gradient [M, N]
  const Tensor x = random_fp8(24, 16, kFloat8E4M3, 22, 4.0f);  // the forward's input [M, K]
  // The weight gradient g^T @ x: a transposed first operand.
  expect_same_bits(testing::scaled_mm_reference(g.to(kFloat32).t(), x.to(kFloat32), sa, sb, kFloat32, Tensor()),
                   scaled_mm(g.t(), x, scalar_tensor(sa), scalar_tensor(sb), kFloat32));
  // Both transposed.
  const Tensor w = random_fp8(40, 24, kFloat8E4M3, 23, 4.0f);
  expect_same_bits(testing::scaled_mm_reference(x.to(kFloat32).t(), w.to(kFloat32).t(), sa, sb, kBFloat16, Tensor()),
                   scaled_mm(x.t(), w.t(), scalar_tensor(sa), scalar_tensor(sb), kBFloat16));
  // Neither dim unit-stride: gathered into row-major first.
  const Tensor big = random_fp8(50, 60, kFloat8E4M3, 24, 4.0f);
  const Tensor a = big.slice(0, 0, 50, 2).slice(1, 1, 60, 3);  // [25, 20]
  const Tensor b = random_fp8(20, 9, kFloat8E4M3, 25, 4.0f);
  expect_same_bits(testing::scaled_mm_reference(a.to(kFloat32), b.to(kFloat32), sa, sb, kFloat32, Tensor()),
                   scaled_mm(a, b, scalar_tensor(sa), scalar_tensor(sb), kFloat32));
}

TEST(ScaledMm, EmptyDimsAndSpecialValues) {
  const Tensor s = scalar_tensor(1.0);
  // K == 0: the empty sum; the result is the bias.
  const Tensor bias = from_vector<float>({1.5f, -2.0f, 0.25f});
  const Tensor out =
      scaled_mm(empty({4, 0}, {.dtype = kFloat8E4M3}), empty({0, 3}, {.dtype = kFloat8E4M3}), s, s, kFloat32, bias);
  expect_same_bits(bias.unsqueeze(0).expand({4, 3}), out);
  EXPECT_EQ(scaled_mm(empty({0, 5}, {.dtype = kFloat8E4M3}), ones({5, 2}).to(kFloat8E4M3), s, s, kBFloat16).shape(),
            (Shape{0, 2}));
  // A nan operand and an infinite E5M2 value propagate; an inf scale times 0 is nan.
  const Tensor a = from_vector<float>({1.0f, kNan, 2.0f, 3.0f}, {2, 2}).to(kFloat8E4M3);
  const Tensor b = from_vector<float>({1.0f, kInf, 0.0f, 1.0f}, {2, 2}).to(kFloat8E5M2);
  const Tensor y = scaled_mm(a, b, s, s, kFloat32);
  EXPECT_TRUE(std::isnan(y.select(0, 0).select(0, 0).item<float>()));
  EXPECT_EQ(y.select(0, 1).select(0, 0).item<float>(), 2.0f);
  EXPECT_EQ(y.select(0, 1).select(0, 1).item<float>(), kInf);
}

TEST(ScaledMm, Errors) {
  const Tensor a = ones({4, 8}).to(kFloat8E4M3), b = ones({8, 2}).to(kFloat8E4M3), s = scalar_tensor(1.0);
  const auto call = [&](const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb, DType out,
                        const Tensor& bias = Tensor()) { return [=] { scaled_mm(a, b, sa, sb, out, bias); }; };
  EXPECT_THAT(error_of(call(ones({4, 8}), b, s, s, kFloat32)),
              HasSubstr("scaled_mm: expected an FP8 a (f8e4m3 or f8e5m2), got f32 [4, 8]. HINT: quantize it"));
  EXPECT_THAT(error_of(call(a, ones({8, 2}, {.dtype = kBFloat16}), s, s, kFloat32)),
              HasSubstr("expected an FP8 b (f8e4m3 or f8e5m2), got bf16 [8, 2]"));
  EXPECT_THAT(error_of(call(a.to(kFloat32).to(kFloat8E5M2), b.to(kFloat32).to(kFloat8E5M2), s, s, kFloat32)),
              HasSubstr("scaled_mm: a and b are both f8e5m2"));
  EXPECT_THAT(error_of(call(a.unsqueeze(0), b, s, s, kFloat32)), HasSubstr("expected a 2-D a, got [1, 4, 8]"));
  EXPECT_THAT(error_of(call(a, b.t(), s, s, kFloat32)),
              HasSubstr("scaled_mm: cannot multiply a [4, 8] by b [2, 8]: inner sizes 8 and 2 differ"));
  EXPECT_THAT(error_of(call(a, b, ones({1}), s, kFloat32)),
              HasSubstr("scaled_mm: scale_inv_a [1] and scale_inv_b [] fit no scaling for a [4, 8] by [8, 2] product: "
                        "per tensor both 0-d; rowwise a [4] or [4, 1] and b [2] or [1, 2]"));
  EXPECT_THAT(error_of(call(a, b, s, scalar_tensor(1.0, {.dtype = kFloat16}), kFloat32)),
              HasSubstr("expected scale_inv_b to be a 0-d f32 tensor (one per-tensor factor), got f16 []"));
  EXPECT_THAT(error_of(call(a, b, s, s, kFloat64)),
              HasSubstr("scaled_mm: expected out_dtype f32, bf16 or f16, got f64"));
  EXPECT_THAT(error_of(call(a, b, s, s, kFloat8E4M3)), HasSubstr("got f8e4m3"));
  EXPECT_THAT(error_of(call(a, b, s, s, kFloat32, ones({3}))),
              HasSubstr("scaled_mm: expected a 1-D bias [2] (one per output column), got [3]"));
  EXPECT_THAT(error_of(call(a, b, s, s, kBFloat16, ones({2}, {.dtype = kFloat16}))),
              HasSubstr("scaled_mm: expected an f32 or bf16 (out_dtype) bias, got f16"));
  EXPECT_THAT(error_of(call(a, Tensor(), s, s, kFloat32)), HasSubstr("scaled_mm: b is an undefined tensor"));
}

// ---- the LinearOverride hook ----

// Takes over linear() for one weight: returns x @ weight^T * 2 (+ bias), so its results are recognisable,
// and records what it was given; declines every other weight.
class DoublingOverride final : public LinearOverride {
 public:
  explicit DoublingOverride(Tensor managed) : managed_(std::move(managed)) {}
  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) override {
    ++calls;
    seen_weight_dtype = weight.dtype();
    seen_x_dtype = x.dtype();
    installed_while_running = linear_override();
    if (!weight.is_same(managed_)) return Tensor();
    // The ordinary linear, called from inside the override: it must not come back here.
    return mul(mantissa::linear(x, weight, bias), 2.0);
  }
  int calls = 0;
  DType seen_weight_dtype = DType::kI64, seen_x_dtype = DType::kI64;
  LinearOverride* installed_while_running = nullptr;

 private:
  Tensor managed_;
};

// Installs an override for a scope, as amp::Fp8Guard does.
struct OverrideScope {
  explicit OverrideScope(LinearOverride* o) : previous(set_linear_override(o)) {}
  ~OverrideScope() { set_linear_override(previous); }
  LinearOverride* previous;
};

TEST(LinearOverride, SeesUncastInputsAndReplacesOrDeclines) {
  const Tensor x = from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f, 1.0f, 1.0f, 1.0f}, {2, 3});
  w.set_requires_grad(true);
  const Tensor other_w = w.detach().clone();
  const Tensor bias = from_vector<float>({0.25f, -0.5f});
  const Tensor plain = linear(x, w, bias);
  Tensor doubled_bf16;
  {
    amp::AutocastGuard autocast({.dtype = DType::kBF16});
    doubled_bf16 = mul(linear(x, w, bias), 2.0).detach();
  }
  EXPECT_EQ(linear_override(), nullptr);

  DoublingOverride fake(w);
  {
    OverrideScope scope(&fake);
    EXPECT_EQ(linear_override(), &fake);
    amp::AutocastGuard autocast({.dtype = DType::kBF16});  // linear is a lower-precision op on the CPU
    const Tensor routed = linear(x, w, bias);
    EXPECT_EQ(fake.calls, 1);
    // The override saw the f32 parameter and input, before autocast's bf16 casts ...
    EXPECT_EQ(fake.seen_weight_dtype, kFloat32);
    EXPECT_EQ(fake.seen_x_dtype, kFloat32);
    // ... ran uninstalled (its own linear() took the ordinary path, under autocast: bf16) ...
    EXPECT_EQ(fake.installed_while_running, nullptr);
    EXPECT_EQ(linear_override(), &fake);
    EXPECT_EQ(routed.dtype(), kBFloat16);
    EXPECT_TRUE(all_close(routed.to(kFloat32), doubled_bf16.to(kFloat32), 0, 0));
    // ... and its result carries the ordinary autograd history back to the f32 master.
    sum(routed).backward();
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().dtype(), kFloat32);

    // A weight it does not manage: declined, the ordinary path runs (and autocast casts).
    const Tensor declined = linear(x, other_w, bias);
    EXPECT_EQ(fake.calls, 2);
    EXPECT_EQ(declined.dtype(), kBFloat16);
  }
  EXPECT_EQ(linear_override(), nullptr);
  EXPECT_TRUE(all_close(linear(x, w, bias), plain, 0, 0));  // gone: nothing routed any more
  EXPECT_EQ(fake.calls, 2);
}

class ThrowingOverride final : public LinearOverride {
 public:
  Tensor linear(const Tensor&, const Tensor&, const Tensor&) override { throw std::runtime_error("override failed"); }
};

TEST(LinearOverride, IsPerThreadNestsAndSurvivesAThrow) {
  ThrowingOverride thrower;
  DoublingOverride fake(ones({1, 1}));
  OverrideScope outer(&fake);
  {
    OverrideScope inner(&thrower);
    EXPECT_EQ(inner.previous, &fake);
    EXPECT_THROW(linear(ones({1, 2}), ones({3, 2})), std::runtime_error);
    EXPECT_EQ(linear_override(), &thrower);  // reinstalled after the throw
    // Another thread has no override.
    LinearOverride* seen = &thrower;
    std::thread([&] { seen = linear_override(); }).join();
    EXPECT_EQ(seen, nullptr);
  }
  EXPECT_EQ(linear_override(), &fake);
}

// The flushed elements: finite, not 0, cast to a zero byte. Counted in the same pass as the overflows, by the
// plain cast and by the folded one (into the state's counter), for both formats and every input dtype.
TEST(QuantizeFp8, CountsTheElementsFlushedToZero) {
  std::mt19937 gen(12);
  std::uniform_real_distribution<float> exponent(-30.0f, 10.0f);
  std::vector<float> v(4099);
  for (float& x : v) x = std::exp2(exponent(gen)) * ((gen() & 1) ? 1.0f : -1.0f);
  v[0] = 0.0f;
  v[1] = -0.0f;
  v[2] = std::numeric_limits<float>::infinity();
  v[3] = std::numeric_limits<float>::quiet_NaN();
  for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Tensor x = from_vector<float>(v).to(in);
      const Fp8Quantized q = quantize_fp8(x, scalar_tensor(1.0), fp8, Fp8Overflow::kSaturate);
      const Tensor xf = x.to(DType::kF32);
      int64_t want = 0;
      for (int64_t i = 0; i < xf.numel(); ++i) {
        const float a = std::fabs(xf.data<float>()[i]);
        const uint8_t byte = static_cast<const uint8_t*>(q.data.data_ptr())[i];
        want += a > 0.0f && std::isfinite(a) && (byte & 0x7f) == 0;
      }
      EXPECT_GT(want, 100) << dtype_name(fp8) << " from " << dtype_name(in);
      EXPECT_EQ(q.underflow.item(), static_cast<double>(want)) << dtype_name(fp8) << " from " << dtype_name(in);
      Tensor counter = zeros({}, {.dtype = DType::kF64});
      quantize_fp8(x, {.fp8 = fp8, .scale = scalar_tensor(1.0), .underflow_into = counter});
      quantize_fp8(x, {.fp8 = fp8, .scale = scalar_tensor(1.0), .underflow_into = counter});
      EXPECT_EQ(counter.item(), 2.0 * static_cast<double>(want));
    }
  }
}

}  // namespace
}  // namespace mantissa
