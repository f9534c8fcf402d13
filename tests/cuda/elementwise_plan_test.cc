// Host-side parts of the CUDA elementwise kernels, run on the CPU: the broadcast/coalescing planner and
// the offset calculator the threads use (every output index maps to the element the CPU reads), launch
// geometry and alignment checks, and the per-element math of ops/pointwise_math.h against the CPU
// ops, compiled here by g++.
#include "ops/elementwise/elementwise_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "framework/autograd.h"
#include "ops/cuda/offset_calc.h"
#include "ops/elementwise/elementwise.h"
#include "ops/pointwise_math.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::random_tensor;
using testing::within_ulps;

// Every output index of the plan reads, through OffsetCalc<I>, the element the expanded input holds there.
template <int N, typename I>
void expect_offsets_match(const Shape& shape, const std::array<const Tensor*, N>& in,
                          const gpu::ElementwiseLayout<N>& l) {
  const gpu::OffsetCalc<N, I> calc = gpu::make_offset_calc<I>(l);
  for (int k = 0; k < N; ++k) {
    const Tensor expanded = in[k]->expand(shape).contiguous();
    const float* base = in[k]->template data<float>();
    const float* want = expanded.data<float>();
    for (int64_t i = 0; i < l.numel; ++i) {
      I off[N];
      calc.offsets(static_cast<I>(i), off);
      ASSERT_EQ(base[off[k]], want[i]) << "input " << k << " output index " << i;
    }
  }
}

TEST(CudaElementwisePlan, ContiguousSameShapeIsFlat) {
  const Tensor a = random_tensor({3, 5}, DType::kF32, 1), b = random_tensor({3, 5}, DType::kF32, 2);
  const auto l = gpu::plan_elementwise<2>({3, 5}, {&a, &b});
  ASSERT_TRUE(l.has_value());
  EXPECT_TRUE(l->flat);
  EXPECT_EQ(l->numel, 15);
}

TEST(CudaElementwisePlan, BroadcastTransposedAndSlicedOffsets) {
  // a: [4, 1, 6] broadcast along dim 1; b: a transposed [5, 6] view; c: every other column of [5, 12].
  const Shape shape{4, 5, 6};
  const Tensor a = random_tensor({4, 1, 6}, DType::kF32, 3);
  const Tensor b = random_tensor({6, 5}, DType::kF32, 4).t();
  const Tensor c = random_tensor({5, 12}, DType::kF32, 5).slice(1, 0, 12, 2);
  const auto l = gpu::plan_elementwise<3>(shape, {&a, &b, &c});
  ASSERT_TRUE(l.has_value());
  EXPECT_FALSE(l->flat);
  EXPECT_EQ(l->numel, 120);
  EXPECT_LE(l->ndim, 3);
  EXPECT_TRUE(gpu::fits_32bit(*l));
  expect_offsets_match<3, uint32_t>(shape, {&a, &b, &c}, *l);
  expect_offsets_match<3, int64_t>(shape, {&a, &b, &c}, *l);
}

TEST(CudaElementwisePlan, CoalescesContiguousDims) {
  // A row vector broadcast over [8, 16, 32] reads one contiguous [16 * 32] block per outer index: two dims.
  const Shape shape{8, 16, 32};
  const Tensor row = random_tensor({16, 32}, DType::kF32, 6);
  const Tensor full = random_tensor(shape, DType::kF32, 7);
  const auto l = gpu::plan_elementwise<2>(shape, {&row, &full});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->ndim, 2);
  EXPECT_EQ(l->sizes[0], 16 * 32);
  EXPECT_EQ(l->strides[0][0], 1);
  EXPECT_EQ(l->strides[0][1], 0);  // broadcast over the outer dim
  expect_offsets_match<2, uint32_t>(shape, {&row, &full}, *l);
}

TEST(CudaElementwisePlan, ScalarTensorBroadcasts) {
  const Shape shape{7, 3};
  const Tensor s = random_tensor({}, DType::kF32, 8), x = random_tensor(shape, DType::kF32, 9);
  const auto l = gpu::plan_elementwise<2>(shape, {&s, &x});
  ASSERT_TRUE(l.has_value());
  expect_offsets_match<2, uint32_t>(shape, {&s, &x}, *l);
}

TEST(CudaElementwisePlan, MoreThanMaxDimsIsRefused) {
  // Alternating broadcast dims cannot be coalesced: 9 dims remain, more than kMaxDims, so the caller
  // must make the inputs contiguous.
  const Shape shape(9, 2);
  Shape sa(9, 2), sb(9, 2);
  for (int d = 0; d < 9; ++d) (d % 2 ? sa : sb)[d] = 1;
  const Tensor a = random_tensor(sa, DType::kF32, 10), b = random_tensor(sb, DType::kF32, 11);
  EXPECT_FALSE(gpu::plan_elementwise<2>(shape, {&a, &b}).has_value());
}

TEST(CudaElementwisePlan, ThirtyTwoBitIndexOnlyWhenItFits) {
  gpu::ElementwiseLayout<1> l;
  l.flat = false;
  l.ndim = 2;
  l.sizes[0] = 1 << 16;
  l.sizes[1] = 1 << 14;
  l.numel = int64_t{1} << 30;
  l.strides[0][0] = 1;
  l.strides[0][1] = 1 << 16;
  EXPECT_TRUE(gpu::fits_32bit(l));
  l.strides[0][1] = 1 << 18;  // an input spread over 2^32 elements: offsets need 64 bits
  EXPECT_FALSE(gpu::fits_32bit(l));
  l.strides[0][1] = 1 << 16;
  l.sizes[1] = 1 << 15;
  l.numel = int64_t{1} << 31;
  EXPECT_FALSE(gpu::fits_32bit(l));
}

TEST(CudaElementwisePlan, LaunchGeometryAndAlignment) {
  EXPECT_EQ(gpu::elementwise_geometry(0).blocks, 1u);
  EXPECT_EQ(gpu::elementwise_geometry(1).blocks, 1u);
  EXPECT_EQ(gpu::elementwise_geometry(257).blocks, 2u);
  EXPECT_EQ(gpu::elementwise_geometry(int64_t{1} << 40).blocks, static_cast<unsigned>(gpu::kMaxBlocks));
  EXPECT_EQ(gpu::vector_width<float>(), 4);
  EXPECT_EQ(gpu::vector_width<Half>(), 8);
  EXPECT_EQ(gpu::vector_width<double>(), 2);
  alignas(16) float buf[8];
  EXPECT_TRUE(gpu::is_vector_aligned(buf, 4, 4));
  EXPECT_FALSE(gpu::is_vector_aligned(buf + 1, 4, 4));
  EXPECT_TRUE(gpu::is_vector_aligned(buf + 1, 1, 4));
}

// The contiguous path's vector width is decided by the tensors' own pointers, storage offset included:
// a view that starts mid-vector, in the output or in any one input, takes the scalar loop.
TEST(CudaElementwisePlan, VectorWidthLooksAtEveryPointerWithItsOffset) {
  alignas(16) uint16_t halves[64];
  alignas(16) bool flags[64];
  const void* aligned[2] = {halves, halves + 16};
  EXPECT_EQ(gpu::flat_vector_width(8, halves + 8, 2, aligned, 2, 2), 8);
  for (int off : {1, 2, 4, 7}) {  // 2, 4 and 8 bytes in: all short of a 16-byte vector
    const void* one_off[2] = {halves, halves + off};
    EXPECT_EQ(gpu::flat_vector_width(8, halves, 2, one_off, 2, 2), 1) << "input offset " << off;
    EXPECT_EQ(gpu::flat_vector_width(8, halves + off, 2, aligned, 2, 2), 1) << "output offset " << off;
  }
  // A compare of f32 writes bools: 4 of them per vector, so the output needs 4-byte alignment only.
  alignas(16) float floats[16];
  const void* f_in[2] = {floats, floats + 4};
  EXPECT_EQ(gpu::flat_vector_width(4, flags + 4, 1, f_in, 2, 4), 4);
  EXPECT_EQ(gpu::flat_vector_width(4, flags + 2, 1, f_in, 2, 4), 1);
  EXPECT_EQ(gpu::flat_vector_width(1, halves + 1, 2, aligned, 2, 2), 1);  // 16-byte elements: never vectors

  // Real views: the narrowed f16 tensor is contiguous (the flat path) but starts one element in.
  const Tensor base = zeros({4, 64}, {.dtype = DType::kF16});
  const Tensor row = base.select(0, 1);  // 128 bytes in: as aligned as the storage
  const Tensor shifted = base.reshape({-1}).narrow(0, 1, 64);
  ASSERT_TRUE(shifted.is_contiguous());
  const void* row_ptr[1] = {row.data_ptr()};
  const void* shifted_ptr[1] = {shifted.data_ptr()};
  if (gpu::is_vector_aligned(base.data_ptr(), 8, 2)) {
    EXPECT_EQ(gpu::flat_vector_width(8, row.data_ptr(), 2, row_ptr, 1, 2), 8);
  }
  EXPECT_EQ(gpu::flat_vector_width(8, row.data_ptr(), 2, shifted_ptr, 1, 2), 1);
}

// ---- the per-element math against the CPU ops ----

// Values the device math gives for x, computed here on the host, as a tensor of x's dtype (16-bit:
// computed in f32 and rounded once, as the kernels do).
Tensor host_unary(const Tensor& x, gpu::PointwiseOp<gpu::UnaryOp> op) {
  const Tensor xf = x.to(DType::kF32).contiguous();
  Tensor out = empty(x.shape(), {.dtype = DType::kF32});
  for (int64_t i = 0; i < x.numel(); ++i) {
    out.data<float>()[i] =
        gpu::apply_unary<float>(op.op, xf.data<float>()[i], static_cast<float>(op.s0), static_cast<float>(op.s1));
  }
  return out.to(x.dtype());
}

Tensor host_binary(const Tensor& a, const Tensor& b, gpu::PointwiseOp<gpu::BinaryOp> op) {
  const Tensor af = a.to(DType::kF32).contiguous(), bf = b.to(DType::kF32).contiguous();
  Tensor out = empty(a.shape(), {.dtype = DType::kF32});
  for (int64_t i = 0; i < a.numel(); ++i) {
    out.data<float>()[i] = gpu::apply_binary<float>(op.op, af.data<float>()[i], bf.data<float>()[i],
                                                    static_cast<float>(op.s0), static_cast<float>(op.s1));
  }
  return out.to(a.dtype());
}

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> cpu;
  gpu::PointwiseOp<gpu::UnaryOp> code;
  gpu::BinaryOp backward;
  bool saves_output;
  // Allowed ulps in f32 between the device formula (libm/CUDA math) and the CPU op: 0 where both use
  // the same IEEE operations; transcendental ops differ by the two libraries' errors (CPU exp/erf are
  // the vectorized ones within 2 ulp, CUDA's expf/tanhf/erff within 2 ulp), so up to 4.
  int64_t ulps_f32;
  double low = -3.0, high = 3.0;
};

std::vector<UnaryCase> unary_cases() {
  using gpu::BinaryOp;
  using gpu::UnaryOp;
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, {UnaryOp::kNeg}, BinaryOp::kMulBackward, false, 0},
      {"exp", [](const Tensor& x) { return exp(x); }, {UnaryOp::kExp}, BinaryOp::kMulBackward, true, 4},
      {"log", [](const Tensor& x) { return log(x); }, {UnaryOp::kLog}, BinaryOp::kLogBackward, false, 2, 0.01, 5.0},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, {UnaryOp::kSqrt}, BinaryOp::kSqrtBackward, true, 0, 0.0, 5.0},
      {"rsqrt",
       [](const Tensor& x) { return rsqrt(x); },
       {UnaryOp::kRsqrt},
       BinaryOp::kRsqrtBackward,
       true,
       0,
       0.01,
       5.0},
      {"abs", [](const Tensor& x) { return abs(x); }, {UnaryOp::kAbs}, BinaryOp::kAbsBackward, false, 0},
      {"relu", [](const Tensor& x) { return relu(x); }, {UnaryOp::kRelu}, BinaryOp::kReluBackward, true, 0},
      {"gelu", [](const Tensor& x) { return gelu(x); }, {UnaryOp::kGelu}, BinaryOp::kGeluBackward, false, 4},
      {"gelu_tanh",
       [](const Tensor& x) { return gelu(x, GeluApproximation::kTanh); },
       {UnaryOp::kGeluTanh},
       BinaryOp::kGeluTanhBackward,
       false,
       4},
      {"tanh", [](const Tensor& x) { return tanh(x); }, {UnaryOp::kTanh}, BinaryOp::kTanhBackward, true, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, {UnaryOp::kSigmoid}, BinaryOp::kSigmoidBackward, true, 4},
      {"silu", [](const Tensor& x) { return silu(x); }, {UnaryOp::kSilu}, BinaryOp::kSiluBackward, false, 4},
      {"add_scalar",
       [](const Tensor& x) { return add(x, 0.3); },
       {UnaryOp::kAddScalar, 0.3},
       BinaryOp::kMulBackward,
       false,
       0},
      {"mul_scalar",
       [](const Tensor& x) { return mul(x, -1.7); },
       {UnaryOp::kMulScalar, -1.7},
       BinaryOp::kMulBackward,
       false,
       0},
      {"div_scalar",
       [](const Tensor& x) { return div(x, 3.0); },
       {UnaryOp::kDivScalar, 3.0},
       BinaryOp::kMulBackward,
       false,
       0},
      {"square", [](const Tensor& x) { return pow(x, 2.0); }, {UnaryOp::kSquare}, BinaryOp::kMulBackward, false, 0},
      {"pow_scalar",
       [](const Tensor& x) { return pow(x, 1.5); },
       {UnaryOp::kPowScalar, 1.5},
       BinaryOp::kPowScalarBackward,
       false,
       2,
       0.01,
       4.0},
      {"clamp",
       [](const Tensor& x) { return clamp(x, -0.5, 1.0); },
       {UnaryOp::kClamp, -0.5, 1.0},
       BinaryOp::kClampBackward,
       false,
       0},
  };
}

TEST(CudaPointwiseMath, UnaryFormulasMatchCpuOps) {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Tensor x = random_tensor({2048}, dt, 21, c.low, c.high);
      // 16-bit: both sides compute in f32 and round once; f32 results a few ulps apart can round to
      // neighbouring 16-bit values, so transcendental ops may differ by 1 ulp of the 16-bit format.
      const int64_t ulps = dt == DType::kF32 ? c.ulps_f32 : (c.ulps_f32 > 0 ? 1 : 0);
      if (c.name == "gelu" && dt == DType::kF32) {
        // gelu = x (1 + erf(x / sqrt 2)) / 2 cancels for negative x: the two libraries' erf, each within
        // 2 ulp of 1, differ by up to ~2.4e-7 absolute, times |x| / 2 <= 1.5: an absolute bound.
        EXPECT_TRUE(testing::within_rel(c.cpu(x), host_unary(x, c.code), 0, 5e-7)) << c.name;
        continue;
      }
      EXPECT_TRUE(within_ulps(c.cpu(x), host_unary(x, c.code), ulps)) << c.name << " " << dtype_name(dt);
    }
  }
}

TEST(CudaPointwiseMath, UnaryBackwardFormulasMatchCpuAutograd) {
  for (const UnaryCase& c : unary_cases()) {
    if (c.name == "neg" || c.name == "add_scalar" || c.name == "mul_scalar" || c.name == "div_scalar" ||
        c.name == "square") {
      continue;  // their backward is a scalar multiply, not a backward op code
    }
    Tensor x = random_tensor({1024}, DType::kF32, 22, c.low, c.high);
    x.set_requires_grad(true);
    const Tensor y = c.cpu(x);
    const Tensor g = random_tensor({1024}, DType::kF32, 23);
    y.backward(g);
    gpu::PointwiseOp<gpu::BinaryOp> code{c.backward, c.code.s0, c.code.s1};
    if (c.backward == gpu::BinaryOp::kPowScalarBackward) code.s1 = c.code.s0 - 1.0;
    const Tensor expected = host_binary(g, c.saves_output ? y.detach() : x.detach(), code);
    // The backward formulas are the CPU functors' own operations in the same order; only gelu's erf and
    // exp come from different libraries (up to 4 ulp, as the forward).
    if (c.name == "gelu") {
      // Phi(x) = (1 + erf) / 2 cancels for negative x (see the forward test): an absolute bound, |g| <= 2.
      EXPECT_TRUE(testing::within_rel(x.grad(), expected, 0, 1e-6)) << c.name;
      continue;
    }
    if (c.name == "silu") {
      // s = sigmoid(x) comes from exp (the two libraries differ by up to 2 ulp) and 1 + x (1 - s) cancels
      // near x = -1.28, so the bound is absolute: |g| <= 2 and |d/ds of s (1 + x (1 - s))| <= 2 on [-3, 3]
      // keep the difference under 1e-6.
      EXPECT_TRUE(testing::within_rel(x.grad(), expected, 0, 1e-6)) << c.name;
      continue;
    }
    const int64_t ulps = c.name == "gelu_tanh" ? 4 : 0;
    EXPECT_TRUE(within_ulps(x.grad(), expected, ulps)) << c.name;
  }
}

TEST(CudaPointwiseMath, ReluAndClampKeepNaN) {
  const float nan = std::nanf("");
  EXPECT_TRUE(std::isnan(gpu::apply_unary<float>(gpu::UnaryOp::kRelu, nan, 0, 0)));
  EXPECT_TRUE(std::isnan(gpu::apply_unary<float>(gpu::UnaryOp::kClamp, nan, -1, 1)));
  EXPECT_EQ(gpu::apply_unary<float>(gpu::UnaryOp::kRelu, -0.5f, 0, 0), 0.0f);
  EXPECT_EQ(gpu::apply_unary<float>(gpu::UnaryOp::kClamp, 5.0f, -INFINITY, 1.0f), 1.0f);
}

TEST(CudaPointwiseMath, BinaryAndTernaryFormulasMatchCpuOps) {
  const Tensor a = random_tensor({512}, DType::kF32, 31), b = random_tensor({512}, DType::kF32, 32, 0.5, 2.0);
  const Tensor c = random_tensor({512}, DType::kF32, 33, 0.5, 2.0);
  // The same IEEE operations in the same order: exact.
  EXPECT_TRUE(within_ulps(add(a, b), host_binary(a, b, {gpu::BinaryOp::kAdd}), 0));
  EXPECT_TRUE(within_ulps(sub(a, b), host_binary(a, b, {gpu::BinaryOp::kSub}), 0));
  EXPECT_TRUE(within_ulps(mul(a, b), host_binary(a, b, {gpu::BinaryOp::kMul}), 0));
  EXPECT_TRUE(within_ulps(div(a, b), host_binary(a, b, {gpu::BinaryOp::kDiv}), 0));
  // pow: glibc's powf on both sides here (the device's powf is within 2 ulp; see the GPU test).
  EXPECT_TRUE(within_ulps(pow(b, a), host_binary(b, a, {gpu::BinaryOp::kPow}), 0));
  Tensor t = empty({512}, {.dtype = DType::kF32});
  for (int64_t i = 0; i < 512; ++i) {
    t.data<float>()[i] = gpu::apply_ternary<float>(gpu::TernaryOp::kAddcmul, a.data<float>()[i], b.data<float>()[i],
                                                   c.data<float>()[i], 0.7f);
  }
  EXPECT_TRUE(within_ulps(addcmul(a, b, c, 0.7), t, 0));
  for (int64_t i = 0; i < 512; ++i) {
    t.data<float>()[i] = gpu::apply_ternary<float>(gpu::TernaryOp::kAddcdiv, a.data<float>()[i], b.data<float>()[i],
                                                   c.data<float>()[i], 0.7f);
  }
  EXPECT_TRUE(within_ulps(addcdiv(a, b, c, 0.7), t, 0));
  for (gpu::CompareOp op : {gpu::CompareOp::kEq, gpu::CompareOp::kLt, gpu::CompareOp::kGe}) {
    const float x = a.data<float>()[0];
    EXPECT_EQ(gpu::apply_compare(op, x, x), op != gpu::CompareOp::kLt);
  }
}

}  // namespace
}  // namespace mantissa
