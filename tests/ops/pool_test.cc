// max_pool2d and avg_pool2d: against direct f64 loops, central-difference gradients (non-contiguous
// input included), argmax routing of ties, 16-bit against f32 rounded once, PyTorch golden values, errors.
#include "ops/pool/pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/ops/op_test_support.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

using testing::expect_gradcheck;
using testing::random_tensor;
using testing::rel_error;
using testing::values;

enum class Kind { kMax, kAvg };

// Direct definition over the padded input: max ignores padding; avg divides by KH*KW.
std::vector<double> pool_reference(const Tensor& x, Pool2dOptions o, Kind kind) {
  const std::vector<double> xv = values(x);
  const int64_t P = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const int64_t kh = o.kernel_size[0], kw = o.kernel_size[1];
  const int64_t sh = o.stride[0] ? o.stride[0] : kh, sw = o.stride[1] ? o.stride[1] : kw;
  const int64_t OH = (H + 2 * o.padding[0] - kh) / sh + 1, OW = (W + 2 * o.padding[1] - kw) / sw + 1;
  std::vector<double> y;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t oy = 0; oy < OH; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox) {
        double m = -std::numeric_limits<double>::infinity(), s = 0;
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t iy = oy * sh - o.padding[0] + i, ix = ox * sw - o.padding[1] + j;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            m = std::max(m, xv[(p * H + iy) * W + ix]);
            s += xv[(p * H + iy) * W + ix];
          }
        y.push_back(kind == Kind::kMax ? m : s / static_cast<double>(kh * kw));
      }
  return y;
}

struct Case {
  const char* name;
  Shape x;
  Pool2dOptions options;
};

std::vector<Case> cases() {
  return {
      {"k2", {2, 3, 8, 8}, {}},
      {"k3_s2_p1_overlap", {2, 2, 7, 9}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {"rect_s1", {1, 2, 5, 6}, {.kernel_size = {2, 3}, .stride = {1, 1}, .padding = {1, 0}}},
      {"k3_odd_size", {2, 1, 7, 7}, {.kernel_size = {3, 3}}},
  };
}

Tensor run(Kind kind, const Tensor& x, Pool2dOptions o) {
  return kind == Kind::kMax ? max_pool2d(x, o) : avg_pool2d(x, o);
}

TEST(Pool2d, ForwardMatchesDirectLoop) {
  for (Kind kind : {Kind::kMax, Kind::kAvg}) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.name);
      const Tensor x = random_tensor(c.x, 1);
      const std::vector<double> ref = pool_reference(x, c.options, kind);
      // f64: sums of <= 9 terms, ~1e-16.
      EXPECT_LT(rel_error(values(run(kind, x, c.options)), ref), 1e-14);
      // f32: the input's own rounding (2^-24) plus an f32 sum of <= 9 terms.
      EXPECT_LT(rel_error(values(run(kind, x.to(kFloat32), c.options)), ref), 1e-6);
    }
  }
}

TEST(Pool2d, GradientsMatchFiniteDifferences) {
  for (Kind kind : {Kind::kMax, Kind::kAvg}) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.name);
      // Random normals have no ties, so max is differentiable at these points.
      Tensor x = random_tensor(c.x, 2).set_requires_grad(true);
      const Pool2dOptions o = c.options;
      expect_gradcheck([&](const std::vector<Tensor>& l) { return run(kind, l[0], o); }, {x});
    }
  }
}

TEST(Pool2d, NonContiguousInput) {
  for (Kind kind : {Kind::kMax, Kind::kAvg}) {
    Tensor xs = random_tensor({2, 7, 3, 6}, 3).set_requires_grad(true);  // stored [N, H, C, W]
    const Pool2dOptions o{.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}};
    auto f = [&](const std::vector<Tensor>& l) { return run(kind, l[0].transpose(1, 2), o); };
    {
      NoGradGuard no_grad;
      EXPECT_LT(rel_error(values(f({xs})), pool_reference(xs.transpose(1, 2), o, kind)), 1e-14);
    }
    expect_gradcheck(f, {xs});
  }
}

TEST(MaxPool2d, TiesRouteTheGradientToTheFirstMaximum) {
  // All-equal 4x4 plane, kernel 2 stride 1: windows overlap; each window's first element gets its grad.
  Tensor x = full({1, 1, 4, 4}, 1.0).set_requires_grad(true);
  max_pool2d(x, {.kernel_size = {2, 2}, .stride = {1, 1}}).backward(ones({1, 1, 3, 3}));
  const std::vector<double> g = values(x.grad());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(g[i * 4 + j], (i < 3 && j < 3) ? 1.0 : 0.0) << i << "," << j;
}

TEST(MaxPool2d, NanIsTheMaximum) {
  const Tensor x = from_vector<float>({1, std::numeric_limits<float>::quiet_NaN(), 3, 2}, {1, 1, 2, 2});
  EXPECT_TRUE(std::isnan(max_pool2d(x, {}).item()));
}

// The 2x2 / stride 2 / unpadded max pool has its own kernels (vectorized, AVX-512 where available);
// values and gradient routing must follow the generic rule exactly: windows scanned row by row, a value
// taken when greater than the running maximum or NaN (so ties go to the first, NaNs to the last NaN).
// Values on a coarse grid make ties common; odd sizes leave unread rows and columns; 18 outputs per row
// cross the 16-lane step.
TEST(MaxPool2d, TwoByTwoStrideTwoFollowsTheGenericRule) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    for (const Shape& shape : {Shape{2, 3, 11, 37}, Shape{1, 2, 26, 26}, Shape{1, 1, 2, 2}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(shape));
      std::vector<double> xv = values(random_tensor(shape, 31));
      for (size_t i = 0; i < xv.size(); ++i) {
        xv[i] = std::round(xv[i] * 2);  // ties
        if (i % 23 == 5) xv[i] = std::numeric_limits<double>::quiet_NaN();
      }
      Tensor x = from_vector<double>(xv, shape).to(dt).set_requires_grad(true);
      const Tensor y = max_pool2d(x, {});
      y.backward(ones(y.shape(), {.dtype = dt}));
      const int64_t P = shape[0] * shape[1], H = shape[2], W = shape[3], OH = H / 2, OW = W / 2;
      std::vector<double> want_y, want_g(xv.size(), 0.0);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t oy = 0; oy < OH; ++oy)
          for (int64_t ox = 0; ox < OW; ++ox) {
            double best = -std::numeric_limits<double>::infinity();
            int64_t at = (p * H + 2 * oy) * W + 2 * ox;
            for (int64_t i = 0; i < 2; ++i)
              for (int64_t j = 0; j < 2; ++j) {
                const int64_t k = (p * H + 2 * oy + i) * W + 2 * ox + j;
                if (xv[k] > best || std::isnan(xv[k])) best = xv[k], at = k;
              }
            want_y.push_back(best);
            want_g[at] += 1;
          }
      const std::vector<double> got_y = values(y), got_g = values(x.grad());
      ASSERT_EQ(got_y.size(), want_y.size());
      for (size_t i = 0; i < want_y.size(); ++i) {
        if (std::isnan(want_y[i])) {
          EXPECT_TRUE(std::isnan(got_y[i])) << i;
        } else {
          EXPECT_EQ(got_y[i], want_y[i]) << i;  // values on a 0.5 grid: exact in every dtype here
        }
      }
      EXPECT_EQ(got_g, want_g);
    }
  }
}

// Max selects an input value (exact in any dtype); avg computes the same fp32 sum and division in both
// paths, so the 16-bit result is the f32 result rounded once, bit for bit. Same for the gradients.
TEST(Pool2d, SixteenBitEqualsF32RoundedOnce) {
  for (DType dt : {kBFloat16, kFloat16}) {
    for (Kind kind : {Kind::kMax, Kind::kAvg}) {
      for (const Case& c : cases()) {
        SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)));
        Tensor x = random_tensor(c.x, 4, dt).set_requires_grad(true);
        Tensor x32 = x.detach().to(kFloat32).set_requires_grad(true);
        const Tensor y = run(kind, x, c.options), y32 = run(kind, x32, c.options);
        EXPECT_EQ(testing::max_ulps_vs_rounded(y, y32), 0);
        const Tensor g = random_tensor(y.shape(), 5, dt);
        y.backward(g);
        y32.backward(g.to(kFloat32));
        EXPECT_EQ(testing::max_ulps_vs_rounded(x.grad(), x32.grad()), 0);
      }
    }
  }
}

void check_golden(const std::string& group, Kind kind) {
  testing::GoldenFile file("ops.h5");
  const int64_t k = file.attr_i64("/" + group, "kernel"), s = file.attr_i64("/" + group, "stride");
  const Pool2dOptions o{.kernel_size = {k, k}, .stride = {s, s}};
  // f64: exact selections or 4-term sums, 1e-10. f32: each value rounded once to f32 (2^-24 relative)
  // plus a 4-term f32 sum: 1e-6 of the scale.
  for (auto [dt, tol] : {std::pair{kFloat64, 1e-10}, std::pair{kFloat32, 1e-6}}) {
    SCOPED_TRACE(group + " " + std::string(dtype_name(dt)));
    Tensor x = file.tensor("/" + group + "/input_0", dt).set_requires_grad(true);
    const Tensor y = run(kind, x, o);
    EXPECT_LT(rel_error(values(y), file.f64("/" + group + "/output")), tol);
    y.backward(file.tensor("/" + group + "/grad_output", dt));
    EXPECT_LT(rel_error(values(x.grad()), file.f64("/" + group + "/grad_input_0")), tol);
  }
}

TEST(MaxPool2d, Golden) { check_golden("max_pool2d_k2", Kind::kMax); }
TEST(AvgPool2d, Golden) { check_golden("avg_pool2d_k2", Kind::kAvg); }

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Pool2d, ErrorsNameTheProblem) {
  const Tensor x = zeros({1, 2, 4, 4});
  expect_error([&] { max_pool2d(zeros({1, 2, 2, 2}), {.kernel_size = {3, 3}}); }, "smaller than the kernel [3, 3]");
  expect_error(
      [&] {
        avg_pool2d(x, {.kernel_size = {2, 2}, .padding = {2, 0}});
      },
      "padding must be between 0 and half the kernel");
  expect_error([&] { max_pool2d(x, {.kernel_size = {0, 2}}); }, "kernel_size must be positive");
  expect_error([&] { avg_pool2d(x, {.stride = {-1, 1}}); }, "stride must be positive");
  expect_error([&] { max_pool2d(zeros({4, 4}), {}); }, "input must be [N, C, H, W] or [C, H, W], got [4, 4]");
  expect_error([&] { avg_pool2d(x.to(kInt32), {}); }, "avg_pool2d: expected a floating input, got i32");
  // An empty plane with padding: every window would be padding only (this read out of bounds before).
  for (const Shape& shape : {Shape{1, 1, 0, 4}, Shape{1, 1, 4, 0}}) {
    expect_error(
        [&] {
          max_pool2d(zeros(shape), {.kernel_size = {2, 2}, .padding = {1, 1}});
        },
        "has an empty height or width");
    expect_error(
        [&] {
          avg_pool2d(zeros(shape), {.kernel_size = {2, 2}, .padding = {1, 1}});
        },
        "has an empty height or width");
  }
  // An empty batch or channel dim is fine: no windows at all.
  EXPECT_EQ(max_pool2d(zeros({0, 2, 4, 4}), {}).shape(), (Shape{0, 2, 2, 2}));
  EXPECT_EQ(avg_pool2d(zeros({1, 0, 4, 4}), {}).shape(), (Shape{1, 0, 2, 2}));
}

TEST(Pool2d, UnbatchedInput) {
  const Tensor x = random_tensor({2, 4, 4}, 6);
  const Tensor y = max_pool2d(x, {});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values(y), values(max_pool2d(x.unsqueeze(0), {})));
}

}  // namespace
}  // namespace mantissa
