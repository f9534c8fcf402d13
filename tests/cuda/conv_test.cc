// conv2d on CUDA. On the CPU (every build): the plan cache key and the choice among cuDNN's ranked
// algorithms (workspace limit, TF32 switch). On a GPU (skipped without one): forward, backward data,
// backward filter and bias gradient through the cuDNN launchers over raw device buffers, and conv2d with
// its backward on CUDA tensors (non-contiguous input included), against the CPU's conv2d in f32, f16 and
// bf16, with stride, padding, dilation and groups. Bounds: tests/cuda/blas_test_support.h.
#include "ops/conv/conv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "ops/conv/conv_plan.h"
#include "ops/elementwise/elementwise.h"
#include "tests/cuda/blas_test_support.h"
#include "tests/ops/op_test_support.h"

#ifdef MANTISSA_WITH_CUDA
#include "ops/conv/conv_launch.h"
#endif

namespace mantissa {
namespace {

using gpu::ConvCandidate;
using gpu::ConvMath;
using gpu::ConvMathType;

cpu::Conv2dGeometry sample_geometry() {
  return {.n = 8,
          .c = 16,
          .h = 28,
          .w = 28,
          .o = 32,
          .kh = 3,
          .kw = 3,
          .oh = 28,
          .ow = 28,
          .stride_h = 1,
          .stride_w = 1,
          .pad_h = 1,
          .pad_w = 1,
          .dil_h = 1,
          .dil_w = 1,
          .groups = 1};
}

gpu::ConvKey sample_key() {
  return {.device = 0,
          .dtype = DType::kF16,
          .math = ConvMath::kExact,
          .direction = gpu::ConvDirection::kForward,
          .geometry = sample_geometry()};
}

// ---- CPU: planning ----

TEST(ConvPlan, KeyEqualityCoversEveryField) {
  const gpu::ConvKey base = sample_key();
  const gpu::ConvKeyHash hash;
  EXPECT_TRUE(base == sample_key());
  EXPECT_EQ(hash(base), hash(sample_key()));
  std::vector<std::function<void(gpu::ConvKey&)>> changes = {
      [](gpu::ConvKey& k) { k.device = 1; },
      [](gpu::ConvKey& k) { k.dtype = DType::kBF16; },
      [](gpu::ConvKey& k) { k.math = ConvMath::kTf32; },
      [](gpu::ConvKey& k) { k.direction = gpu::ConvDirection::kBackwardData; },
      [](gpu::ConvKey& k) { k.direction = gpu::ConvDirection::kBackwardFilter; },
      [](gpu::ConvKey& k) { k.geometry.n = 9; },
      [](gpu::ConvKey& k) { k.geometry.c = 8; },
      [](gpu::ConvKey& k) { k.geometry.h = 27; },
      [](gpu::ConvKey& k) { k.geometry.w = 27; },
      [](gpu::ConvKey& k) { k.geometry.o = 31; },
      [](gpu::ConvKey& k) { k.geometry.kh = 5; },
      [](gpu::ConvKey& k) { k.geometry.kw = 5; },
      [](gpu::ConvKey& k) { k.geometry.oh = 14; },
      [](gpu::ConvKey& k) { k.geometry.ow = 14; },
      [](gpu::ConvKey& k) { k.geometry.stride_h = 2; },
      [](gpu::ConvKey& k) { k.geometry.stride_w = 2; },
      [](gpu::ConvKey& k) { k.geometry.pad_h = 0; },
      [](gpu::ConvKey& k) { k.geometry.pad_w = 0; },
      [](gpu::ConvKey& k) { k.geometry.dil_h = 2; },
      [](gpu::ConvKey& k) { k.geometry.dil_w = 2; },
      [](gpu::ConvKey& k) { k.geometry.groups = 2; },
  };
  std::set<size_t> hashes = {hash(base)};
  for (size_t i = 0; i < changes.size(); ++i) {
    gpu::ConvKey changed = base;
    changes[i](changed);
    EXPECT_FALSE(changed == base) << "change " << i;
    hashes.insert(hash(changed));
  }
  EXPECT_EQ(hashes.size(), changes.size() + 1);  // a hash that ignored a field would collide here
}

// Exact f32 takes only FMA kernels (cuDNN's default math may use TF32); TF32 allows tensor ops but never
// down-conversion to f16; 16-bit and f64 take any math.
TEST(ConvPlan, MathAllowedKeepsTheDtypeContract) {
  EXPECT_TRUE(gpu::conv_math_allowed(DType::kF32, ConvMath::kExact, ConvMathType::kFma));
  EXPECT_FALSE(gpu::conv_math_allowed(DType::kF32, ConvMath::kExact, ConvMathType::kDefault));
  EXPECT_FALSE(gpu::conv_math_allowed(DType::kF32, ConvMath::kExact, ConvMathType::kTensorOp));
  EXPECT_TRUE(gpu::conv_math_allowed(DType::kF32, ConvMath::kTf32, ConvMathType::kTensorOp));
  EXPECT_TRUE(gpu::conv_math_allowed(DType::kF32, ConvMath::kTf32, ConvMathType::kDefault));
  EXPECT_FALSE(gpu::conv_math_allowed(DType::kF32, ConvMath::kTf32, ConvMathType::kTensorOpAllowConversion));
  for (DType d : {DType::kF16, DType::kBF16, DType::kF64}) {
    for (ConvMathType m : {ConvMathType::kDefault, ConvMathType::kTensorOp, ConvMathType::kFma}) {
      EXPECT_TRUE(gpu::conv_math_allowed(d, ConvMath::kExact, m)) << dtype_name(d);
    }
  }
}

// The first candidate (cuDNN ranks fastest first) that succeeded, fits the limit and keeps the contract.
TEST(ConvPlan, PicksFirstUsableCandidate) {
  const std::vector<ConvCandidate> list = {
      {.algo = 7, .ok = false, .workspace = 0, .math = ConvMathType::kFma},      // failed
      {.algo = 6, .ok = true, .workspace = 1000, .math = ConvMathType::kFma},    // too large for 512
      {.algo = 1, .ok = true, .workspace = 0, .math = ConvMathType::kTensorOp},  // TF32 for f32
      {.algo = 0, .ok = true, .workspace = 100, .math = ConvMathType::kFma},
  };
  EXPECT_EQ(gpu::pick_conv_candidate(list, DType::kF32, ConvMath::kExact, 512), 3);
  EXPECT_EQ(gpu::pick_conv_candidate(list, DType::kF32, ConvMath::kExact, 1000), 1);
  EXPECT_EQ(gpu::pick_conv_candidate(list, DType::kF32, ConvMath::kTf32, 512), 2);
  EXPECT_EQ(gpu::pick_conv_candidate(list, DType::kF16, ConvMath::kExact, 512), 2);
  EXPECT_EQ(gpu::pick_conv_candidate(list, DType::kF32, ConvMath::kExact, 50), -1);
  EXPECT_EQ(gpu::pick_conv_candidate({}, DType::kF32, ConvMath::kExact, 1 << 30), -1);
}

// ---- GPU ----

// One geometry of the GPU tests: x [N, C, H, W], w [O, C/G, KH, KW].
struct ConvCase {
  Shape x, w;
  Conv2dOptions options;
};

std::vector<ConvCase> conv_cases() {
  return {
      {{2, 3, 11, 11}, {5, 3, 3, 3}, {.padding = {1, 1}}},
      // Odd sizes, rectangular kernel, stride, asymmetric padding, dilation and 2 groups.
      {{3, 6, 9, 13}, {4, 3, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2}},
      {{2, 8, 7, 7}, {8, 1, 3, 3}, {.padding = {1, 1}, .groups = 8}},  // depthwise
      {{2, 16, 5, 5}, {24, 16, 1, 1}, {}},                             // pointwise
  };
}

// cuDNN may pick Winograd or FFT algorithms, whose error is a small multiple of a direct sum's (the
// transforms amplify rounding errors): slack 8 on the dot-product bound.
constexpr double kConvSlack = 8.0;

// The CPU's conv2d forward and backward (grad dy) on dtype-`dt` tensors: {y, dx, dw, db}.
std::vector<Tensor> conv_with_grads(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& dy,
                                    const Conv2dOptions& options) {
  const Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true),
               b = b0.detach().set_requires_grad(true);
  const Tensor y = conv2d(x, w, b, options);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// Depth of the sums behind y, dx, dw, db (the bias counts as one more term of y).
std::vector<int64_t> depths(const Shape& x, const Shape& w, const Shape& y, int64_t groups) {
  return {w[1] * w[2] * w[3] + 1, w[0] / groups * w[2] * w[3], x[0] * y[2] * y[3], x[0] * y[2] * y[3]};
}

void expect_conv_results(const std::vector<Tensor>& got_cpu, const std::vector<Tensor>& ref,
                         const std::vector<Tensor>& s, const std::vector<int64_t>& depth, DType dt) {
  const char* names[4] = {"y", "dx", "dw", "db"};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(names[i]);
    ASSERT_EQ(got_cpu[i].shape(), ref[i].shape());
    EXPECT_EQ(testing::count_beyond_bound(testing::values(got_cpu[i]), testing::values(ref[i]), testing::values(s[i]),
                                          depth[i], dt, kConvSlack),
              0);
  }
}

class CudaConv : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaConv, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

#ifdef MANTISSA_WITH_CUDA
template <typename T>
std::vector<T> host_values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<T>(c.data<T>(), c.data<T>() + c.numel());
}

template <typename T>
Tensor tensor_of(const std::vector<T>& v, const Shape& shape) {
  return from_vector<T>(v, shape, {.dtype = dtype_v<T>});
}

// The four launchers over raw (poisoned) device buffers, against the CPU op.
template <typename T>
void check_launchers(const ConvCase& cc, uint64_t seed) {
  const DType dt = dtype_v<T>;
  const Tensor x = testing::random_tensor(cc.x, seed).to(dt), w = testing::random_tensor(cc.w, seed + 1).to(dt),
               b = testing::random_tensor({cc.w[0]}, seed + 2).to(dt);
  const Tensor y_shape_probe = conv2d(x, w, Tensor(), cc.options);
  const Tensor dy = testing::random_tensor(y_shape_probe.shape(), seed + 3).to(dt);
  const std::vector<Tensor> ref = conv_with_grads(x, w, b, dy, cc.options);
  const std::vector<Tensor> s = conv_with_grads(abs(x.to(DType::kF64)), abs(w.to(DType::kF64)), abs(b.to(DType::kF64)),
                                                abs(dy.to(DType::kF64)), cc.options);
  const Shape& ys = y_shape_probe.shape();
  const cpu::Conv2dGeometry g{.n = cc.x[0],
                              .c = cc.x[1],
                              .h = cc.x[2],
                              .w = cc.x[3],
                              .o = cc.w[0],
                              .kh = cc.w[2],
                              .kw = cc.w[3],
                              .oh = ys[2],
                              .ow = ys[3],
                              .stride_h = cc.options.stride[0],
                              .stride_w = cc.options.stride[1],
                              .pad_h = cc.options.padding[0],
                              .pad_w = cc.options.padding[1],
                              .dil_h = cc.options.dilation[0],
                              .dil_w = cc.options.dilation[1],
                              .groups = cc.options.groups};
  testing::DeviceBuffer<T> dx_in(x.numel()), dw_in(w.numel()), db_in(b.numel()), ddy(dy.numel()), dy_out(dy.numel()),
      ddx(x.numel()), ddw(w.numel()), ddb(b.numel());
  dx_in.upload(host_values<T>(x));
  dw_in.upload(host_values<T>(w));
  db_in.upload(host_values<T>(b));
  ddy.upload(host_values<T>(dy));
  gpu::conv2d_forward<T>(g, dx_in.get(), dw_in.get(), db_in.get(), dy_out.get(), 0, nullptr);
  gpu::conv2d_backward_data<T>(g, ddy.get(), dw_in.get(), ddx.get(), 0, nullptr);
  gpu::conv2d_backward_filter<T>(g, dx_in.get(), ddy.get(), ddw.get(), 0, nullptr);
  gpu::conv2d_backward_bias<T>(g, ddy.get(), ddb.get(), 0, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<Tensor> got = {tensor_of(dy_out.download(), ys), tensor_of(ddx.download(), cc.x),
                                   tensor_of(ddw.download(), cc.w), tensor_of(ddb.download(), {cc.w[0]})};
  expect_conv_results(got, ref, s, depths(cc.x, cc.w, ys, cc.options.groups), dt);
}

TEST_P(CudaConv, LaunchersMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  const std::vector<ConvCase> cases = conv_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    dispatch_floating(GetParam(), "test", [&]<typename T>() { check_launchers<T>(cases[i], 100 + 10 * i); });
  }
}

// A repeated geometry reuses its plans: the second pass builds none.
TEST(CudaConvPlans, RepeatedGeometryReusesPlans) {
  MT_SKIP_WITHOUT_CUDA();
  const ConvCase cc = conv_cases()[0];
  check_launchers<float>(cc, 7);
  const gpu::ConvStats first = gpu::conv_stats();
  check_launchers<float>(cc, 7);
  const gpu::ConvStats second = gpu::conv_stats();
  EXPECT_EQ(second.plans_built, first.plans_built);
  EXPECT_GE(second.plan_hits, first.plan_hits + 3);  // forward, backward data, backward filter (+ bias)
}
#endif  // MANTISSA_WITH_CUDA

// conv2d and its backward on CUDA tensors (needs the CUDA backend's allocator and copies). The input is
// a non-contiguous view (NHWC storage permuted to NCHW), which the op makes contiguous.
TEST_P(CudaConv, OpAndBackwardMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  const DType dt = GetParam();
  const std::vector<ConvCase> cases = conv_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const ConvCase& cc = cases[i];
    const Shape nhwc = {cc.x[0], cc.x[2], cc.x[3], cc.x[1]};
    const Tensor x_store = testing::random_tensor(nhwc, 200 + i).to(dt);
    const Tensor w = testing::random_tensor(cc.w, 201 + i).to(dt);
    const Tensor b = testing::random_tensor({cc.w[0]}, 202 + i).to(dt);
    const Tensor x = x_store.permute({0, 3, 1, 2});
    const Shape ys = conv2d(x, w, Tensor(), cc.options).shape();
    const Tensor dy = testing::random_tensor(ys, 203 + i).to(dt);
    const std::vector<Tensor> ref = conv_with_grads(x, w, b, dy, cc.options);
    const std::vector<Tensor> s = conv_with_grads(abs(x.to(DType::kF64)), abs(w.to(DType::kF64)),
                                                  abs(b.to(DType::kF64)), abs(dy.to(DType::kF64)), cc.options);
    const Tensor x_gpu = x_store.to(cuda(0)).permute({0, 3, 1, 2});
    ASSERT_FALSE(x_gpu.is_contiguous());
    const std::vector<Tensor> out = conv_with_grads(x_gpu, w.to(cuda(0)), b.to(cuda(0)), dy.to(cuda(0)), cc.options);
    std::vector<Tensor> got;
    for (const Tensor& t : out) {
      ASSERT_EQ(t.device(), cuda(0));
      ASSERT_EQ(t.dtype(), dt);
      got.push_back(t.to(kCPU));
    }
    expect_conv_results(got, ref, s, depths(cc.x, cc.w, ys, cc.options.groups), dt);
  }
}

}  // namespace
}  // namespace mantissa
