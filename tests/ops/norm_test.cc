// layer_norm and batch_norm: against direct f64 loops, the fused kernels against the same formula
// composed from elementwise/reduce ops (values and gradients), central-difference gradients (non-
// contiguous inputs included), running statistics, 16-bit against f32 rounded once, golden values, errors.
#include "ops/norm/norm.h"

#include <gtest/gtest.h>

#include "ops/elementwise/elementwise.h"
#include "ops/pool/pool.h"
#include "tests/ops/op_test_support.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

using testing::expect_gradcheck;
using testing::random_tensor;
using testing::rel_error;
using testing::values;

// Direct layer norm over rows of `cols` values: (x - mean) / sqrt(biased var + eps) * w + b.
std::vector<double> layer_norm_reference(const Tensor& x, int64_t cols, const Tensor& w, const Tensor& b, double eps) {
  const std::vector<double> xv = values(x), wv = w.defined() ? values(w) : std::vector<double>(cols, 1.0),
                            bv = b.defined() ? values(b) : std::vector<double>(cols, 0.0);
  std::vector<double> y(xv.size());
  for (size_t r = 0; r < xv.size() / cols; ++r) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < cols; ++j) m += xv[r * cols + j] / cols;
    for (int64_t j = 0; j < cols; ++j) v += (xv[r * cols + j] - m) * (xv[r * cols + j] - m) / cols;
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = (xv[r * cols + j] - m) / std::sqrt(v + eps) * wv[j] + bv[j];
  }
  return y;
}

// The same formula from primitives (autograd through them gives the composed backward).
Tensor layer_norm_composed(const Tensor& x, int64_t k, const Tensor& w, const Tensor& b, double eps) {
  Shape dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  const Tensor xm = x - mean(x, dims, KeepDim::kYes);
  Tensor y = xm * rsqrt(mean(xm * xm, dims, KeepDim::kYes) + eps);
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  return y;
}

// Batch norm from primitives: statistics over every dim but 1 (train) or the running ones (eval).
Tensor batch_norm_composed(const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w, const Tensor& b,
                           BatchNormMode mode, double eps) {
  Shape dims{0}, pshape{1, x.size(1)};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d), pshape.push_back(1);
  Tensor mu, var;
  if (mode == BatchNormMode::kTrain) {
    mu = mean(x, dims, KeepDim::kYes);
    var = mean((x - mu) * (x - mu), dims, KeepDim::kYes);
  } else {
    mu = rm.reshape(pshape), var = rv.reshape(pshape);
  }
  Tensor y = (x - mu) * rsqrt(var + eps);
  if (w.defined()) y = y * w.reshape(pshape);
  if (b.defined()) y = y + b.reshape(pshape);
  return y;
}

TEST(LayerNorm, ForwardMatchesDirectLoop) {
  const Tensor x = random_tensor({3, 4, 2, 5}, 1, kFloat64, 2.0), w = random_tensor({2, 5}, 2),
               b = random_tensor({2, 5}, 3);
  for (bool affine : {true, false}) {
    const Tensor wa = affine ? w : Tensor(), ba = affine ? b : Tensor();
    const std::vector<double> ref = layer_norm_reference(x, 10, wa, ba, 1e-5);
    // f64: two-pass statistics over 10 values, ~1e-15.
    EXPECT_LT(rel_error(values(layer_norm(x, {2, 5}, wa, ba)), ref), 1e-13);
    // f32: inputs rounded to f32 and f32 sums of 10 terms; normalized values are O(1): 1e-5 is ample.
    const Tensor w32 = affine ? w.to(kFloat32) : Tensor(), b32 = affine ? b.to(kFloat32) : Tensor();
    EXPECT_LT(rel_error(values(layer_norm(x.to(kFloat32), {2, 5}, w32, b32)), ref), 1e-5);
  }
}

TEST(LayerNorm, FusedEqualsComposed) {
  Tensor x = random_tensor({4, 3, 6}, 4, kFloat64, 3.0).set_requires_grad(true);
  Tensor w = random_tensor({6}, 5).set_requires_grad(true), b = random_tensor({6}, 6).set_requires_grad(true);
  Tensor x2 = x.detach().clone().set_requires_grad(true), w2 = w.detach().clone().set_requires_grad(true),
         b2 = b.detach().clone().set_requires_grad(true);
  const Tensor g = random_tensor({4, 3, 6}, 7);
  const Tensor y = layer_norm(x, {6}, w, b, 1e-3), y2 = layer_norm_composed(x2, 1, w2, b2, 1e-3);
  y.backward(g);
  y2.backward(g);
  // Same math in f64, different association: agreement to ~1e-15 of the scale.
  EXPECT_LT(rel_error(values(y), values(y2)), 1e-12);
  EXPECT_LT(rel_error(values(x.grad()), values(x2.grad())), 1e-12);
  EXPECT_LT(rel_error(values(w.grad()), values(w2.grad())), 1e-12);
  EXPECT_LT(rel_error(values(b.grad()), values(b2.grad())), 1e-12);
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  Tensor x = random_tensor({3, 2, 4}, 8).set_requires_grad(true);
  Tensor w = random_tensor({2, 4}, 9).set_requires_grad(true), b = random_tensor({2, 4}, 10).set_requires_grad(true);
  expect_gradcheck([](const std::vector<Tensor>& l) { return layer_norm(l[0], {2, 4}, l[1], l[2]); }, {x, w, b});
  // Non-contiguous input (stored transposed), no affine parameters.
  Tensor xs = random_tensor({5, 3}, 11).set_requires_grad(true);
  expect_gradcheck([](const std::vector<Tensor>& l) { return layer_norm(l[0].t(), {5}); }, {xs});
}

// The 16-bit path widens to fp32 and runs the same fp32 arithmetic as the f32 path, rounding once at
// the end, so it equals the f32 result rounded once, bit for bit (values and all three gradients).
TEST(LayerNorm, SixteenBitEqualsF32RoundedOnce) {
  for (DType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_tensor({6, 40}, 12, dt, 2.0).set_requires_grad(true);
    Tensor w = random_tensor({40}, 13, dt).set_requires_grad(true),
           b = random_tensor({40}, 14, dt).set_requires_grad(true);
    Tensor x32 = x.detach().to(kFloat32).set_requires_grad(true), w32 = w.detach().to(kFloat32).set_requires_grad(true),
           b32 = b.detach().to(kFloat32).set_requires_grad(true);
    const Tensor y = layer_norm(x, {40}, w, b), y32 = layer_norm(x32, {40}, w32, b32);
    EXPECT_EQ(testing::max_ulps_vs_rounded(y, y32), 0);
    const Tensor g = random_tensor({6, 40}, 15, dt);
    y.backward(g);
    y32.backward(g.to(kFloat32));
    EXPECT_EQ(testing::max_ulps_vs_rounded(x.grad(), x32.grad()), 0);
    EXPECT_EQ(testing::max_ulps_vs_rounded(w.grad(), w32.grad()), 0);
    EXPECT_EQ(testing::max_ulps_vs_rounded(b.grad(), b32.grad()), 0);
  }
}

TEST(LayerNorm, MixedPrecisionParametersGetF32Gradients) {
  Tensor x = random_tensor({2, 8}, 16, kBFloat16).set_requires_grad(true);
  Tensor w = ones({8}).set_requires_grad(true);  // f32 master weight with bf16 activations
  layer_norm(x, {8}, w).backward(ones({2, 8}, {.dtype = kBFloat16}));
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(x.grad().dtype(), kBFloat16);
}

TEST(BatchNorm, ForwardMatchesComposedAndDirect) {
  for (const Shape& shape : {Shape{8, 3}, Shape{4, 3, 5, 2}}) {
    for (BatchNormMode mode : {BatchNormMode::kTrain, BatchNormMode::kEval}) {
      SCOPED_TRACE(shape_str(shape) + (mode == BatchNormMode::kTrain ? " train" : " eval"));
      const Tensor x = random_tensor(shape, 17, kFloat64, 2.0) + 1.0;
      const Tensor w = random_tensor({3}, 18), b = random_tensor({3}, 19);
      const Tensor rm = random_tensor({3}, 20), rv = random_tensor({3}, 21) * random_tensor({3}, 21) + 0.5;
      const Tensor rm_copy = rm.clone(), rv_copy = rv.clone();
      const Tensor y = batch_norm(x, rm_copy, rv_copy, w, b, mode);
      const std::vector<double> ref = values(batch_norm_composed(x, rm, rv, w, b, mode, 1e-5));
      EXPECT_LT(rel_error(values(y), ref), 1e-13);  // f64, same math, different association
      // Direct check of one element: channel 1 of element 0.
      const std::vector<double> xv = values(x.transpose(0, 1).contiguous());  // channel-major
      const int64_t m = x.numel() / 3;
      double mu = 0, var = 0;
      for (int64_t i = 0; i < m; ++i) mu += xv[m + i] / m;
      for (int64_t i = 0; i < m; ++i) var += (xv[m + i] - mu) * (xv[m + i] - mu) / m;
      if (mode == BatchNormMode::kEval) mu = values(rm)[1], var = values(rv)[1];
      const int64_t s = x.numel() / (x.size(0) * 3);
      const double x0 = values(x)[s];  // element (0, 1, 0, 0)
      EXPECT_NEAR(values(y)[s], (x0 - mu) / std::sqrt(var + 1e-5) * values(w)[1] + values(b)[1], 1e-12);
    }
  }
}

TEST(BatchNorm, TrainUpdatesRunningStatsEvalLeavesThem) {
  const Tensor x = random_tensor({5, 2, 3, 3}, 22, kFloat64, 3.0) + 2.0;
  Tensor rm = zeros({2}, {.dtype = kFloat64}), rv = ones({2}, {.dtype = kFloat64});
  const double momentum = 0.3;
  const std::vector<double> batch_mean = values(mean(x, {0, 2, 3})), batch_var = values(var(x, {0, 2, 3}));  // unbiased
  batch_norm(x, rm, rv, Tensor(), Tensor(), BatchNormMode::kTrain, momentum);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(values(rm)[c], momentum * batch_mean[c], 1e-14);
    EXPECT_NEAR(values(rv)[c], (1 - momentum) * 1.0 + momentum * batch_var[c], 1e-13);
  }
  batch_norm(x, rm, rv, Tensor(), Tensor(), BatchNormMode::kTrain, momentum);  // a second step compounds
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(values(rm)[c], (1 - momentum) * momentum * batch_mean[c] + momentum * batch_mean[c], 1e-14);
  }
  const std::vector<double> before_m = values(rm), before_v = values(rv);
  batch_norm(x, rm, rv, Tensor(), Tensor(), BatchNormMode::kEval, momentum);
  EXPECT_EQ(values(rm), before_m);
  EXPECT_EQ(values(rv), before_v);
  // f32 running stats with bf16 input (the mixed-precision model): updated in f32.
  Tensor rm32 = zeros({2}), rv32 = ones({2});
  batch_norm(x.to(kBFloat16), rm32, rv32, Tensor(), Tensor(), BatchNormMode::kTrain, momentum);
  const std::vector<double> bm16 = values(mean(x.to(kBFloat16).to(kFloat64), {0, 2, 3}));
  // The bf16 input's own batch mean, computed in fp32 over 45 values: 1e-6 relative.
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(values(rm32)[c], momentum * bm16[c], 1e-6 * std::abs(bm16[c]) + 1e-7);
}

TEST(BatchNorm, FusedEqualsComposedGradients) {
  for (BatchNormMode mode : {BatchNormMode::kTrain, BatchNormMode::kEval}) {
    Tensor x = random_tensor({4, 3, 2, 3}, 23, kFloat64, 2.0).set_requires_grad(true);
    Tensor w = random_tensor({3}, 24).set_requires_grad(true), b = random_tensor({3}, 25).set_requires_grad(true);
    Tensor x2 = x.detach().clone().set_requires_grad(true), w2 = w.detach().clone().set_requires_grad(true),
           b2 = b.detach().clone().set_requires_grad(true);
    const Tensor rm = random_tensor({3}, 26), rv = full({3}, 0.7, {.dtype = kFloat64});
    const Tensor g = random_tensor(x.shape(), 27);
    batch_norm(x, rm.clone(), rv.clone(), w, b, mode).backward(g);
    batch_norm_composed(x2, rm, rv, w2, b2, mode, 1e-5).backward(g);
    EXPECT_LT(rel_error(values(x.grad()), values(x2.grad())), 1e-12);  // f64, same math
    EXPECT_LT(rel_error(values(w.grad()), values(w2.grad())), 1e-12);
    EXPECT_LT(rel_error(values(b.grad()), values(b2.grad())), 1e-12);
  }
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  for (BatchNormMode mode : {BatchNormMode::kTrain, BatchNormMode::kEval}) {
    Tensor x = random_tensor({3, 2, 2, 3}, 28).set_requires_grad(true);
    Tensor w = random_tensor({2}, 29).set_requires_grad(true), b = random_tensor({2}, 30).set_requires_grad(true);
    const Tensor rm = random_tensor({2}, 31), rv = full({2}, 1.3, {.dtype = kFloat64});
    // Running stats are cloned per call so the finite differences see identical eval statistics.
    expect_gradcheck(
        [&](const std::vector<Tensor>& l) { return batch_norm(l[0], rm.clone(), rv.clone(), l[1], l[2], mode); },
        {x, w, b});
    // [N, C] input stored transposed (non-contiguous), no affine parameters.
    Tensor xs = random_tensor({3, 5}, 32).set_requires_grad(true);
    expect_gradcheck(
        [&](const std::vector<Tensor>& l) {
          return batch_norm(l[0].t(), rm.narrow(0, 0, 1).expand({3}).contiguous(), full({3}, 0.9, {.dtype = kFloat64}),
                            Tensor(), Tensor(), mode);
        },
        {xs});
  }
}

// Same argument as for layer_norm: identical fp32 arithmetic, one rounding at the end.
TEST(BatchNorm, SixteenBitEqualsF32RoundedOnce) {
  for (DType dt : {kBFloat16, kFloat16}) {
    for (BatchNormMode mode : {BatchNormMode::kTrain, BatchNormMode::kEval}) {
      SCOPED_TRACE(dtype_name(dt));
      Tensor x = random_tensor({4, 3, 5, 5}, 33, dt, 2.0).set_requires_grad(true);
      Tensor w = random_tensor({3}, 34, dt).set_requires_grad(true),
             b = random_tensor({3}, 35, dt).set_requires_grad(true);
      Tensor x32 = x.detach().to(kFloat32).set_requires_grad(true),
             w32 = w.detach().to(kFloat32).set_requires_grad(true),
             b32 = b.detach().to(kFloat32).set_requires_grad(true);
      const Tensor rm = random_tensor({3}, 36, dt), rv = full({3}, 1.5, {.dtype = dt});
      const Tensor y = batch_norm(x, rm.clone(), rv.clone(), w, b, mode);
      const Tensor y32 = batch_norm(x32, rm.to(kFloat32), rv.to(kFloat32), w32, b32, mode);
      EXPECT_EQ(testing::max_ulps_vs_rounded(y, y32), 0);
      const Tensor g = random_tensor(x.shape(), 37, dt);
      y.backward(g);
      y32.backward(g.to(kFloat32));
      EXPECT_EQ(testing::max_ulps_vs_rounded(x.grad(), x32.grad()), 0);
      EXPECT_EQ(testing::max_ulps_vs_rounded(w.grad(), w32.grad()), 0);
      EXPECT_EQ(testing::max_ulps_vs_rounded(b.grad(), b32.grad()), 0);
    }
  }
}

// Golden tolerances: f64 to 1e-10. f32: inputs rounded to f32, statistics summed in f32 over 8
// (layer_norm) or 96 (batch_norm) values, and the backward's difference of O(1) terms; errors stay
// near 1e-6 of each tensor's scale, so 1e-5.
TEST(LayerNorm, Golden) {
  testing::GoldenFile file("ops.h5");
  const double eps = file.attr_f64("/layer_norm", "eps");
  for (auto [dt, tol] : {std::pair{kFloat64, 1e-10}, std::pair{kFloat32, 1e-5}}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = file.tensor("/layer_norm/input_0", dt).set_requires_grad(true);
    Tensor w = file.tensor("/layer_norm/input_1", dt).set_requires_grad(true);
    Tensor b = file.tensor("/layer_norm/input_2", dt).set_requires_grad(true);
    const Tensor y = layer_norm(x, {x.size(-1)}, w, b, eps);
    EXPECT_LT(rel_error(values(y), file.f64("/layer_norm/output")), tol);
    y.backward(file.tensor("/layer_norm/grad_output", dt));
    EXPECT_LT(rel_error(values(x.grad()), file.f64("/layer_norm/grad_input_0")), tol);
    EXPECT_LT(rel_error(values(w.grad()), file.f64("/layer_norm/grad_input_1")), tol);
    EXPECT_LT(rel_error(values(b.grad()), file.f64("/layer_norm/grad_input_2")), tol);
  }
}

TEST(BatchNorm, GoldenTrain) {
  testing::GoldenFile file("ops.h5");
  const double eps = file.attr_f64("/batch_norm_train", "eps");
  for (auto [dt, tol] : {std::pair{kFloat64, 1e-10}, std::pair{kFloat32, 1e-5}}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = file.tensor("/batch_norm_train/input_0", dt).set_requires_grad(true);
    Tensor w = file.tensor("/batch_norm_train/input_1", dt).set_requires_grad(true);
    Tensor b = file.tensor("/batch_norm_train/input_2", dt).set_requires_grad(true);
    Tensor rm = zeros({x.size(1)}, {.dtype = dt}), rv = ones({x.size(1)}, {.dtype = dt});
    const Tensor y = batch_norm(x, rm, rv, w, b, BatchNormMode::kTrain, 0.1, eps);
    EXPECT_LT(rel_error(values(y), file.f64("/batch_norm_train/output")), tol);
    y.backward(file.tensor("/batch_norm_train/grad_output", dt));
    EXPECT_LT(rel_error(values(x.grad()), file.f64("/batch_norm_train/grad_input_0")), tol);
    EXPECT_LT(rel_error(values(w.grad()), file.f64("/batch_norm_train/grad_input_1")), tol);
    EXPECT_LT(rel_error(values(b.grad()), file.f64("/batch_norm_train/grad_input_2")), tol);
  }
}

void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Norm, ErrorsNameTheProblem) {
  const Tensor x = zeros({4, 3, 8});
  expect_error([&] { layer_norm(x, {3}); },
               "normalized_shape [3] must be non-empty and equal the last dims of input [4, 3, 8]");
  expect_error([&] { layer_norm(x, {8}, zeros({7})); }, "layer_norm: weight must be [8] for input [4, 3, 8], got [7]");
  expect_error([&] { layer_norm(x, {8}, zeros({8}, {.dtype = kFloat64})); }, "weight is f64 but input is f32");
  expect_error([&] { batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), BatchNormMode::kTrain); },
               "input must be [N, C] or [N, C, H, W], got [4]");
  expect_error(
      [&] {
        batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), BatchNormMode::kTrain);
      },
      "more than one value per channel");
  expect_error(
      [&] {
        batch_norm(zeros({2, 3}), Tensor(), Tensor(), Tensor(), Tensor(), BatchNormMode::kEval);
      },
      "eval mode needs running_mean and running_var");
  expect_error(
      [&] {
        batch_norm(zeros({2, 3, 4, 4}), zeros({4}), ones({4}), Tensor(), Tensor(), BatchNormMode::kEval);
      },
      "batch_norm: running_mean must be [3] for input [2, 3, 4, 4], got [4]");
  expect_error(
      [&] {
        batch_norm(zeros({2, 3}), zeros({3}), Tensor(), Tensor(), Tensor(), BatchNormMode::kTrain);
      },
      "give both running_mean and running_var");
}

// batch_norm_relu_pool2d against the three ops it fuses: the forward bit for bit (it rounds each normalized
// value as batch_norm does, then takes max_pool2d's maximum and relu), the backward to rounding (its
// channel sums run over the pooled grid, skipping the zeros the composed backward adds in); odd sizes
// (a row and a column no window covers), both modes, and the running statistics.
Tensor relu_pool(const Tensor& y) { return relu(max_pool2d(y, {.kernel_size = {2, 2}})); }

void expect_bn_relu_pool_matches(DType dtype, BatchNormMode mode, const Shape& shape, double grad_tol) {
  const int64_t c = shape[1];
  Tensor x = random_tensor(shape, 41, kFloat64, 2.0).to(dtype).set_requires_grad(true);
  Tensor w = random_tensor({c}, 42).to(dtype).set_requires_grad(true);
  Tensor b = random_tensor({c}, 43).to(dtype).set_requires_grad(true);
  Tensor x2 = x.detach().clone().set_requires_grad(true), w2 = w.detach().clone().set_requires_grad(true),
         b2 = b.detach().clone().set_requires_grad(true);
  const Tensor rm0 = random_tensor({c}, 44).to(dtype), rv0 = full({c}, 0.7, {.dtype = dtype});
  Tensor rm = rm0.clone(), rv = rv0.clone(), rm2 = rm0.clone(), rv2 = rv0.clone();
  const Tensor y = batch_norm_relu_pool2d(x, rm, rv, w, b, mode);
  const Tensor want = relu_pool(batch_norm(x2, rm2, rv2, w2, b2, mode));
  ASSERT_EQ(y.shape(), want.shape());
  EXPECT_EQ(values(y), values(want)) << dtype_name(dtype) << ": the forward is the composition's, bit for bit";
  EXPECT_EQ(values(rm), values(rm2)) << "running mean";
  EXPECT_EQ(values(rv), values(rv2)) << "running var";
  const Tensor g = random_tensor(y.shape(), 45).to(dtype);
  y.backward(g);
  want.backward(g);
  EXPECT_LT(rel_error(values(x.grad()), values(x2.grad())), grad_tol) << "dx";
  EXPECT_LT(rel_error(values(w.grad()), values(w2.grad())), grad_tol) << "dw";
  EXPECT_LT(rel_error(values(b.grad()), values(b2.grad())), grad_tol) << "db";
}

TEST(BatchNormReluPool, EqualsTheThreeOps) {
  for (BatchNormMode mode : {BatchNormMode::kTrain, BatchNormMode::kEval}) {
    // f64: the sums differ in order only (1e-12); f32 likewise (1e-5); bf16: the same f32 sums, and dx rounds
    // once to bf16 from either, so a sum an ulp apart can land an element an ulp apart (1e-2).
    expect_bn_relu_pool_matches(kFloat64, mode, {4, 3, 6, 8}, 1e-12);
    expect_bn_relu_pool_matches(kFloat64, mode, {3, 2, 11, 11}, 1e-12);
    expect_bn_relu_pool_matches(kFloat32, mode, {8, 5, 13, 10}, 1e-5);
    expect_bn_relu_pool_matches(kBFloat16, mode, {8, 4, 12, 12}, 1e-2);
  }
}

TEST(BatchNormReluPool, NaNWinsItsWindowAsInTheComposition) {
  Tensor x = random_tensor({2, 1, 4, 4}, 46);
  x.data<double>()[5] = std::nan("");  // sample 0, window (0, 0)
  const Tensor rm = zeros({1}, {.dtype = kFloat64}), rv = ones({1}, {.dtype = kFloat64});
  const Tensor y = batch_norm_relu_pool2d(x, rm, rv, Tensor(), Tensor(), BatchNormMode::kEval);
  const Tensor want = relu_pool(batch_norm(x, rm, rv, Tensor(), Tensor(), BatchNormMode::kEval));
  EXPECT_TRUE(std::isnan(y.data<double>()[0]));
  const std::vector<double> a = values(y), e = values(want);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_EQ(a[i], e[i]) << i;
}

TEST(BatchNormReluPool, ErrorsNameTheOp) {
  try {
    batch_norm_relu_pool2d(zeros({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), BatchNormMode::kTrain);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_norm_relu_pool2d: expected an input [N, C, H, W], got [2, 3, 4]"),
              std::string::npos)
        << e.what();
  }
  try {
    batch_norm_relu_pool2d(zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), BatchNormMode::kTrain);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch_norm_relu_pool2d: training needs more than one value per channel"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mantissa
