// conv2d: against a direct f64 loop, central-difference gradients (non-contiguous inputs included),
// 16-bit against f32 rounded once, PyTorch golden values, and the error messages.
#include "ops/conv/conv.h"

#include <gtest/gtest.h>

#include "tests/ops/op_test_support.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

using testing::expect_gradcheck;
using testing::random_tensor;
using testing::rel_error;
using testing::values;

// Direct definition: y[n,o,oy,ox] = b[o] + sum_{ci,ki,kj} x[n, g*Cg+ci, oy*s-p+ki*d, ox*s-p+kj*d] w[o,ci,ki,kj].
std::vector<double> conv2d_reference(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  const std::vector<double> xv = values(x), wv = values(w), bv = b.defined() ? values(b) : std::vector<double>();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), KH = w.size(2), KW = w.size(3), Og = O / o.groups;
  const int64_t OH = (H + 2 * o.padding[0] - o.dilation[0] * (KH - 1) - 1) / o.stride[0] + 1;
  const int64_t OW = (W + 2 * o.padding[1] - o.dilation[1] * (KW - 1) - 1) / o.stride[1] + 1;
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double s = bv.empty() ? 0.0 : bv[oc];
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                const int64_t iy = oy * o.stride[0] - o.padding[0] + ki * o.dilation[0];
                const int64_t ix = ox * o.stride[1] - o.padding[1] + kj * o.dilation[1];
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                const int64_t c = (oc / Og) * Cg + ci;
                s += xv[((n * C + c) * H + iy) * W + ix] * wv[((oc * Cg + ci) * KH + ki) * KW + kj];
              }
          y.push_back(s);
        }
  return y;
}

struct Case {
  const char* name;
  Shape x, w;
  Conv2dOptions options;
  bool bias;
};

std::vector<Case> cases() {
  return {
      {"3x3_pad1", {2, 3, 7, 6}, {4, 3, 3, 3}, {.padding = {1, 1}}, true},
      {"stride2_nobias", {2, 3, 9, 8}, {5, 3, 3, 3}, {.stride = {2, 2}}, false},
      {"rect_stride_pad", {1, 2, 8, 7}, {3, 2, 2, 3}, {.stride = {1, 2}, .padding = {2, 1}}, true},
      {"dilation", {2, 2, 9, 9}, {3, 2, 3, 3}, {.padding = {2, 1}, .dilation = {2, 3}}, true},
      {"groups", {2, 6, 5, 5}, {4, 3, 3, 3}, {.padding = {1, 1}, .groups = 2}, true},
      {"depthwise", {2, 4, 6, 6}, {4, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 4}, false},
      {"pointwise", {2, 5, 4, 3}, {6, 5, 1, 1}, {}, true},
      {"pointwise_grouped", {2, 4, 3, 3}, {6, 2, 1, 1}, {.groups = 2}, true},
      // One input channel, stride 1, no padding: f32/bf16 take the direct kernels (ops/conv/conv_direct_cpu),
      // over several 64-output blocks and the fused 3x3 weight-gradient pass, and a 2x3 kernel.
      {"one_channel_3x3", {2, 1, 20, 19}, {4, 1, 3, 3}, {}, true},
      {"one_channel_2x3_nobias", {3, 1, 7, 9}, {2, 1, 2, 3}, {}, false},
  };
}

TEST(Conv2d, ForwardMatchesDirectLoopF64AndF32) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = random_tensor(c.x, 1), w = random_tensor(c.w, 2);
    const Tensor b = c.bias ? random_tensor({c.w[0]}, 3) : Tensor();
    const std::vector<double> ref = conv2d_reference(x, w, b, c.options);
    // f64: the only difference is summation order, K <= 27 terms: ~1e-15.
    EXPECT_LT(rel_error(values(conv2d(x, w, b, c.options)), ref), 1e-13);
    const Tensor b32 = b.defined() ? b.to(kFloat32) : Tensor();
    // f32: inputs rounded to f32 (2^-24 each) plus f32 sums of <= 28 terms: well under 1e-5 of the scale.
    EXPECT_LT(rel_error(values(conv2d(x.to(kFloat32), w.to(kFloat32), b32, c.options)), ref), 1e-5);
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = random_tensor(c.x, 4).set_requires_grad(true);
    Tensor w = random_tensor(c.w, 5).set_requires_grad(true);
    std::vector<Tensor> leaves{x, w};
    if (c.bias) leaves.push_back(random_tensor({c.w[0]}, 6).set_requires_grad(true));
    const Conv2dOptions o = c.options;
    expect_gradcheck(
        [&](const std::vector<Tensor>& l) { return conv2d(l[0], l[1], l.size() > 2 ? l[2] : Tensor(), o); }, leaves);
  }
}

// f32 takes oneDNN where it implements the case (the direct kernels for one input channel, im2col + GEMM
// where neither applies); its gradients must agree with the f64 ones (im2col, checked by finite
// differences above). f32 sums of at most 2*18*17 = 612 (one_channel_3x3's weight grads) products of
// O(1) values, error ~ sqrt(612) * 2^-24 ~ 1.5e-6: 1e-5 of each tensor's scale.
TEST(Conv2d, F32GradientsMatchF64) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> l64;
    l64.reserve(3);
    l64.push_back(random_tensor(c.x, 16));
    l64.push_back(random_tensor(c.w, 17));
    if (c.bias) l64.push_back(random_tensor({c.w[0]}, 18));
    std::vector<Tensor> l32;
    for (Tensor& t : l64) {
      l32.push_back(t.to(kFloat32).set_requires_grad(true));
      t.set_requires_grad(true);
    }
    auto run = [&](const std::vector<Tensor>& l, DType dt) {
      const Tensor y = conv2d(l[0], l[1], l.size() > 2 ? l[2] : Tensor(), c.options);
      y.backward(random_tensor(y.shape(), 19, dt));
    };
    run(l64, kFloat64);
    run(l32, kFloat32);
    for (size_t i = 0; i < l64.size(); ++i)
      EXPECT_LT(rel_error(values(l32[i].grad()), values(l64[i].grad())), 1e-5) << i;
  }
}

TEST(Conv2d, NonContiguousInputsGiveSameValuesAndGradients) {
  // x stored as [N, H, C, W] and viewed as NCHW; the weight stored transposed in its kernel dims.
  Tensor xs = random_tensor({2, 6, 3, 5}, 7).set_requires_grad(true);
  Tensor ws = random_tensor({4, 3, 3, 2}, 8).set_requires_grad(true);
  Tensor b = random_tensor({4}, 9).set_requires_grad(true);
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 1}};
  auto f = [&](const std::vector<Tensor>& l) {
    return conv2d(l[0].permute({0, 2, 1, 3}), l[1].transpose(2, 3), l[2], o);
  };
  {
    NoGradGuard no_grad;
    const Tensor x = xs.permute({0, 2, 1, 3}), w = ws.transpose(2, 3);
    ASSERT_FALSE(x.is_contiguous());
    EXPECT_LT(rel_error(values(f({xs, ws, b})), conv2d_reference(x, w, b, o)), 1e-13);
  }
  expect_gradcheck(f, {xs, ws, b});
}

TEST(Conv2d, UnbatchedInput) {
  const Tensor x = random_tensor({3, 5, 5}, 10), w = random_tensor({2, 3, 3, 3}, 11);
  const Tensor y = conv2d(x, w, Tensor(), {.padding = {1, 1}});
  EXPECT_EQ(y.shape(), (Shape{2, 5, 5}));
  EXPECT_EQ(values(y), values(conv2d(x.unsqueeze(0), w, Tensor(), {.padding = {1, 1}})));
}

// 16-bit: operands are exactly representable, products are exact in fp32 and sums accumulate in fp32,
// so the result is the f32 result rounded once. The f32 GEMM may add the k terms in another order
// than the 16-bit path, which can move a value across a rounding boundary: 1 ulp allowed.
TEST(Conv2d, SixteenBitEqualsF32RoundedOnce) {
  for (DType dt : {kBFloat16, kFloat16}) {
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)));
      Tensor x = random_tensor(c.x, 12, dt).set_requires_grad(true);
      Tensor w = random_tensor(c.w, 13, dt, 0.5).set_requires_grad(true);
      Tensor b = c.bias ? random_tensor({c.w[0]}, 14, dt).set_requires_grad(true) : Tensor();
      Tensor x32 = x.detach().to(kFloat32).set_requires_grad(true);
      Tensor w32 = w.detach().to(kFloat32).set_requires_grad(true);
      Tensor b32 = c.bias ? b.detach().to(kFloat32).set_requires_grad(true) : Tensor();
      const Tensor y = conv2d(x, w, b, c.options), y32 = conv2d(x32, w32, b32, c.options);
      ASSERT_EQ(y.dtype(), dt);
      EXPECT_LE(testing::max_ulps_vs_rounded(y, y32), 1);
      const Tensor g32 = random_tensor(y.shape(), 15, kFloat32);
      y.backward(g32.to(dt));
      y32.backward(g32.to(dt).to(kFloat32));
      ASSERT_EQ(x.grad().dtype(), dt);
      EXPECT_LE(testing::max_ulps_vs_rounded(x.grad(), x32.grad()), 1);
      EXPECT_LE(testing::max_ulps_vs_rounded(w.grad(), w32.grad()), 1);
      if (c.bias) {
        EXPECT_LE(testing::max_ulps_vs_rounded(b.grad(), b32.grad()), 1);
      }
    }
  }
}

void check_golden(const std::string& group) {
  testing::GoldenFile file("ops.h5");
  const int64_t stride = file.attr_i64("/" + group, "stride"), padding = file.attr_i64("/" + group, "padding");
  const Conv2dOptions o{.stride = {stride, stride}, .padding = {padding, padding}};
  // f64 to 1e-10 (PyTorch's own f64 sums differ only in order). f32: inputs rounded to f32 and f32
  // sums of 27 (forward, weight grads up to 2*9*8 = 144) terms; 2e-5 of each tensor's scale covers it.
  for (auto [dt, tol] : {std::pair{kFloat64, 1e-10}, std::pair{kFloat32, 2e-5}}) {
    SCOPED_TRACE(group + " " + std::string(dtype_name(dt)));
    Tensor x = file.tensor("/" + group + "/input_0", dt).set_requires_grad(true);
    Tensor w = file.tensor("/" + group + "/input_1", dt).set_requires_grad(true);
    Tensor b = file.tensor("/" + group + "/input_2", dt).set_requires_grad(true);
    const Tensor y = conv2d(x, w, b, o);
    EXPECT_LT(rel_error(values(y), file.f64("/" + group + "/output")), tol);
    y.backward(file.tensor("/" + group + "/grad_output", dt));
    EXPECT_LT(rel_error(values(x.grad()), file.f64("/" + group + "/grad_input_0")), tol);
    EXPECT_LT(rel_error(values(w.grad()), file.f64("/" + group + "/grad_input_1")), tol);
    EXPECT_LT(rel_error(values(b.grad()), file.f64("/" + group + "/grad_input_2")), tol);
  }
}

TEST(Conv2d, GoldenStride1Pad1) { check_golden("conv2d_s1_p1"); }
TEST(Conv2d, GoldenStride2Pad0) { check_golden("conv2d_s2_p0"); }

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Conv2d, ErrorsNameTheProblem) {
  const Tensor x = zeros({2, 3, 8, 8}), w = zeros({4, 3, 3, 3});
  expect_error([&] { conv2d(x, zeros({4, 2, 3, 3})); }, "has 3 channels but weight [4, 2, 3, 3] expects 2");
  expect_error(
      [&] {
        conv2d(zeros({2, 4, 8, 8}), zeros({3, 2, 3, 3}), Tensor(), {.groups = 2});
      },
      "groups=2 must divide");
  expect_error([&] { conv2d(x, w, zeros({3})); }, "bias must be [4]");
  expect_error([&] { conv2d(x, w.to(kFloat64)); }, "input is f32 but weight is f64");
  expect_error([&] { conv2d(zeros({1, 3, 2, 2}), w); }, "smaller than the dilated kernel");
  expect_error([&] { conv2d(x, w, Tensor(), {.stride = {0, 1}}); }, "stride and dilation must be positive");
  expect_error([&] { conv2d(zeros({3, 8}), w); }, "input must be [N, C, H, W]");
  expect_error([&] { conv2d(x.to(kInt64), w.to(kInt64)); }, "expected a floating input");
}

}  // namespace
}  // namespace mantissa
