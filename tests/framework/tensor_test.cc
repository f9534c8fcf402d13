// Tensor factories in every dtype, to(dtype) between every pair, clone, contiguous, item(), printing, and
// the errors misuse gets. Views and autograd through them are in tensor_view_test.cc.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

const DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                            DType::kI64, DType::kI32, DType::kBool};

// The tensor's values in row-major order, as doubles.
std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::kF64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// The message of the mantissa::Error that f throws, or "no error".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// ---- factories ----

TEST(TensorFactory, EmptyHasContiguousGeometry) {
  for (DType dt : kAllDTypes) {
    const Tensor t = empty({2, 3, 4}, {.dtype = dt});
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
    EXPECT_EQ(t.offset(), 0);
    EXPECT_EQ(t.dim(), 3);
    EXPECT_EQ(t.numel(), 24);
    EXPECT_EQ(t.nbytes(), 24 * element_size(dt));
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_FALSE(t.requires_grad());
  }
  EXPECT_EQ(element_size(DType::kF16), 2u);
  EXPECT_EQ(element_size(DType::kBool), 1u);
  const Tensor none = empty({3, 0});
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.nbytes(), 0u);
  const Tensor scalar = empty({});
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.numel(), 1);
}

TEST(TensorFactory, ZerosOnesFullInEveryDtype) {
  for (DType dt : kAllDTypes) {
    EXPECT_EQ(values(zeros({2, 2}, {.dtype = dt})), std::vector<double>(4, 0.0)) << dtype_name(dt);
    EXPECT_EQ(values(ones({3}, {.dtype = dt})), std::vector<double>(3, 1.0)) << dtype_name(dt);
    const double want = dt == DType::kBool ? 1.0 : 3.0;  // any non-zero value is true
    EXPECT_EQ(values(full({2}, 3.0, {.dtype = dt})), std::vector<double>(2, want)) << dtype_name(dt);
  }
  // A value that is not representable rounds once to the dtype.
  EXPECT_EQ(full({1}, 0.1, {.dtype = DType::kF16}).data<Half>()[0].bits, Half(0.1f).bits);
  EXPECT_EQ(full({1}, 0.1, {.dtype = DType::kBF16}).data<BFloat16>()[0].bits, BFloat16(0.1f).bits);
  EXPECT_EQ(full({1}, 1e6, {.dtype = DType::kF16}).item(), INFINITY);  // past f16's range
  EXPECT_EQ(full({1}, -2.7, {.dtype = DType::kI32}).item(), -2.0);     // toward zero, as C++ casts
  const Tensor like = full_like(empty({2, 5}, {.dtype = DType::kBF16}), 2.0);
  EXPECT_EQ(like.shape(), (Shape{2, 5}));
  EXPECT_EQ(like.dtype(), DType::kBF16);
  EXPECT_EQ(values(zeros_like(like)), std::vector<double>(10, 0.0));
  EXPECT_EQ(values(ones_like(like)), std::vector<double>(10, 1.0));
  EXPECT_EQ(scalar_tensor(4.5).item(), 4.5);
  EXPECT_TRUE(zeros({2}, {.requires_grad = true}).requires_grad());
}

TEST(TensorFactory, Arange) {
  const Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::kI64);
  EXPECT_EQ(values(a), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(arange(1, 2, 0.25, {.dtype = DType::kF32})), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(values(arange(5, 0, -2)), (std::vector<double>{5, 3, 1}));
  EXPECT_EQ(arange(0, 1, 0.1, {.dtype = DType::kF64}).numel(), 10);  // ceil((end - start) / step)
  EXPECT_EQ(arange(3, 3).numel(), 0);
  for (DType dt : kAllDTypes) {
    if (dt == DType::kBool) continue;
    EXPECT_EQ(values(arange(4, {.dtype = dt})), (std::vector<double>{0, 1, 2, 3})) << dtype_name(dt);
  }
  // f16 counts exactly up to 2048, then in steps of 2: each element rounds once.
  const Tensor h = arange(2046, 2052, 1, {.dtype = DType::kF16});
  EXPECT_EQ(values(h), (std::vector<double>{2046, 2047, 2048, 2048, 2050, 2052}));
}

TEST(TensorFactory, FromVectorInEveryDtype) {
  EXPECT_EQ(values(from_vector<float>({1.5f, -2.0f})), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(values(from_vector<double>({0.1, 2.0}, {2, 1})), (std::vector<double>{0.1, 2.0}));
  EXPECT_EQ(values(from_vector<Half>({Half(0.5f), Half(-3.0f)})), (std::vector<double>{0.5, -3.0}));
  EXPECT_EQ(values(from_vector<BFloat16>({BFloat16(256.0f)})), (std::vector<double>{256.0}));
  EXPECT_EQ(values(from_vector<int64_t>({int64_t{1} << 40, -7})), (std::vector<double>{1099511627776.0, -7}));
  EXPECT_EQ(values(from_vector<int32_t>({3, -4}, {1, 2})), (std::vector<double>{3, -4}));
  const Tensor b = from_vector<bool>({true, false, true});
  EXPECT_EQ(b.dtype(), DType::kBool);
  EXPECT_EQ(values(b), (std::vector<double>{1, 0, 1}));
  for (DType dt : kAllDTypes) {
    const Tensor t = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3}, {.dtype = dt});
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    const std::vector<double> want =
        dt == DType::kBool ? std::vector<double>{0, 1, 1, 1, 1, 1} : std::vector<double>{0, 1, 2, 3, 4, 5};
    EXPECT_EQ(values(t), want) << dtype_name(dt);
  }
  // Converting on the way in rounds once, as to() does.
  const Tensor h = from_vector<float>({0.1f, 65520.0f}, {2}, {.dtype = DType::kF16});
  EXPECT_EQ(h.data<Half>()[0].bits, Half(0.1f).bits);
  EXPECT_EQ(h.data<Half>()[1].bits, 0x7c00u);
  EXPECT_TRUE(from_vector<float>({1}, {1}, {.requires_grad = true}).requires_grad());
}

// ---- conversions ----

// Every (from, to) pair: values representable everywhere survive; bool is "non-zero".
TEST(TensorConvert, ToBetweenEveryPairOfDtypes) {
  const std::vector<double> base = {0, 1, -2, 3, 100};
  for (DType from : kAllDTypes) {
    const Tensor src = from_vector<double>(base, {5}, {.dtype = from});
    const std::vector<double> src_values = values(src);
    for (DType to : kAllDTypes) {
      const Tensor out = src.to(to);
      EXPECT_EQ(out.dtype(), to);
      EXPECT_EQ(out.shape(), src.shape());
      std::vector<double> want = src_values;
      if (to == DType::kBool) {
        for (double& v : want) v = v != 0 ? 1 : 0;
      }
      EXPECT_EQ(values(out), want) << dtype_name(from) << " -> " << dtype_name(to);
      if (from == to) {
        EXPECT_TRUE(out.is_same(src)) << "to() of the same dtype returns the tensor itself";
      } else {
        EXPECT_FALSE(out.shares_storage(src));
      }
    }
  }
}

TEST(TensorConvert, RoundingAndTruncation) {
  const Tensor f = from_vector<float>({0.1f, -2.7f, 2.7f, 65520.0f, 1e-8f});
  const Tensor h = f.to(DType::kF16);
  EXPECT_EQ(h.data<Half>()[0].bits, Half(0.1f).bits);
  EXPECT_EQ(h.data<Half>()[3].bits, 0x7c00u);  // overflow to inf
  EXPECT_EQ(h.data<Half>()[4].bits, 0x0000u);  // 1e-8 is below half of the smallest subnormal
  EXPECT_EQ(values(f.to(DType::kI64)), (std::vector<double>{0, -2, 2, 65520, 0}));  // toward zero
  // f64 -> f16 goes through f32, as PyTorch does: 1 + 2^-11 + 2^-40 rounds to 1 + 2^-11 in f32, then the
  // f16 tie goes to even (1.0).
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(from_vector<double>({d}).to(DType::kF16).item(), 1.0);
  // A strided source converts element by element.
  const Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).t();
  EXPECT_EQ(values(m.to(DType::kBF16)), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_TRUE(m.to(DType::kBF16).is_contiguous());
}

TEST(TensorConvert, CloneAndContiguous) {
  const Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor c = a.clone();
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(values(c), values(a));
  c.data<float>()[0] = 42.0f;
  EXPECT_EQ(a.data<float>()[0], 1.0f) << "a clone is independent";
  EXPECT_TRUE(a.contiguous().is_same(a));
  const Tensor t = a.t();
  EXPECT_FALSE(t.is_contiguous());
  const Tensor tc = t.contiguous();
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_FALSE(tc.shares_storage(a));
  EXPECT_EQ(tc.strides(), (Shape{2, 1}));
  EXPECT_EQ(values(tc), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(values(t.clone()), values(tc));
  EXPECT_TRUE(t.clone().is_contiguous());
}

TEST(TensorItem, OneElementInEveryDtype) {
  for (DType dt : kAllDTypes) {
    EXPECT_EQ(full({1, 1}, 1.0, {.dtype = dt}).item(), 1.0) << dtype_name(dt);
  }
  EXPECT_EQ(full({}, -0.5, {.dtype = DType::kBF16}).item(), -0.5);
  EXPECT_EQ(from_vector<int64_t>({7}).item<int64_t>(), 7);
  EXPECT_EQ(from_vector<float>({1, 2, 3}).narrow(0, 2, 1).item(), 3.0);  // at the view's offset
}

// ---- printing ----

TEST(TensorPrint, ShapeDtypeAndValues) {
  EXPECT_EQ(from_vector<float>({1, 2.5f, -3}).str(), "Tensor(shape=[3], dtype=f32) [1, 2.5, -3]");
  EXPECT_EQ(from_vector<int32_t>({1, 2, 3, 4}, {2, 2}).str(), "Tensor(shape=[2, 2], dtype=i32) [1, 2, 3, 4]");
  EXPECT_EQ(from_vector<bool>({true, false}).str(), "Tensor(shape=[2], dtype=bool) [true, false]");
  EXPECT_EQ(full({1}, 0.1, {.dtype = DType::kF16}).str(), "Tensor(shape=[1], dtype=f16) [0.0999756]");
  // Long tensors show three values at each end.
  EXPECT_EQ(arange(10).str(), "Tensor(shape=[10], dtype=i64) [0, 1, 2, ..., 7, 8, 9]");
  EXPECT_EQ(arange(8).str(), "Tensor(shape=[8], dtype=i64) [0, 1, 2, 3, 4, 5, 6, 7]");
  EXPECT_EQ(zeros({2}, {.requires_grad = true}).str(), "Tensor(shape=[2], dtype=f32, requires_grad) [0, 0]");
  EXPECT_EQ(empty({0, 3}).str(), "Tensor(shape=[0, 3], dtype=f32) []");
  EXPECT_EQ(Tensor().str(), "Tensor(undefined)");
  // Views print their own values in row-major order; operator<< prints the same.
  const Tensor t = from_vector<double>({1, 2, 3, 4}, {2, 2}).t();
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), "Tensor(shape=[2, 2], dtype=f64) [1, 3, 2, 4]");
}

// ---- errors: each names the op and what is wrong ----

TEST(TensorErrors, MisuseIsReportedWithAClearMessage) {
  const Tensor a = arange(24, {.dtype = DType::kF32}).view({2, 3, 4});
  const std::array<std::pair<std::string, std::string>, 17> cases = {{
      {error_of([&] {
         a.view({5, 5});
       }),
       "view: shape [5, 5] is invalid for an input of 24 elements"},
      {error_of([&] {
         a.view({-1, -1});
       }),
       "view: only one dimension can be -1"},
      {error_of([&] {
         a.view({-1, 5});
       }),
       "view: shape [-1, 5] is invalid for 24 elements"},
      {error_of([&] { a.transpose(0, 2).view({24}); }), "HINT: use reshape()"},
      {error_of([&] { a.narrow(2, 2, 3); }), "narrow: [2, 5) is out of range for dim 2 of size 4"},
      {error_of([&] { a.select(1, 3); }), "select: index 3 is out of range for dim 1 of size 3"},
      {error_of([&] { a.item(); }), "item(): expected a tensor with one element, got shape [2, 3, 4] (24 elements)"},
      {error_of([&] { a.transpose(0, 3); }), "transpose: dim 3 is out of range for a tensor with 3 dims"},
      {error_of([&] {
         a.permute({0, 1});
       }),
       "permute: got 2 dims [0, 1] for a tensor with 3 dims"},
      {error_of([&] {
         a.permute({0, 1, 0});
       }),
       "permute: dim 0 appears twice"},
      {error_of([&] {
         a.expand({2, 5, 4});
       }),
       "expand: the size 3 at dim 1 of [2, 3, 4] cannot become 5"},
      {error_of([&] {
         a.expand({3, 4});
       }),
       "expand: cannot expand [2, 3, 4] to fewer dims [3, 4]"},
      {error_of([&] { a.t(); }), "t(): expects a tensor with at most 2 dims, got [2, 3, 4]"},
      {error_of([&] { a.data<double>(); }), "data<T>(): the tensor holds f32 but the pointer asked for is f64"},
      {error_of([] {
         empty({2, -1});
       }),
       "empty: sizes must be non-negative, got [2, -1]"},
      {error_of([] { arange(0, 5, 0); }), "arange: step must be non-zero"},
      {error_of([] {
         from_vector<float>({1, 2, 3}, {2, 2});
       }),
       "from_data: 3 values do not fill shape [2, 2]"},
  }};
  for (const auto& [got, want] : cases) EXPECT_NE(got.find(want), std::string::npos) << got << "\nwanted: " << want;
  EXPECT_NE(error_of([] {
              arange(5, {.dtype = DType::kI64}).set_requires_grad(true);
            }).find("only floating tensors can require gradients, got i64"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tensor().shape(); }).find("undefined"), std::string::npos);
  EXPECT_NE(error_of([&] { a.flatten(2, 1); }).find("flatten: start_dim 2 comes after end_dim 1"), std::string::npos);
  EXPECT_NE(error_of([&] { a.slice(0, 0, 2, 0); }).find("slice: step must be positive"), std::string::npos);
}

}  // namespace
}  // namespace mantissa
