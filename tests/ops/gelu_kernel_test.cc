// GELU's (erf form) block kernels: the contiguous kernel, the strided elementwise path and the AVX2
// build (the CPU's best build runs in the op) must give the same bits, forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/gelu_cpu.h"
#include "tests/ops/op_test_support.h"

namespace mantissa {
namespace {

using testing::values;

// 37 x 1500 values in [-8, 8] (both erf branches, the tails) plus specials; rows longer than a block.
std::vector<float> inputs() {
  Generator g(17);
  std::vector<float> v(37 * 1500);
  for (float& x : v) x = static_cast<float>(g.uniform_double() * 16 - 8);
  v[0] = 0.0f;
  v[1] = -0.0f;
  v[2] = INFINITY;
  v[3] = -INFINITY;
  v[4] = NAN;
  v[5] = 1.25f * std::numbers::sqrt2_v<float>;  // erf's branch switch
  return v;
}

void expect_same_bits(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  int diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]));
    if (!same && diff < 3) ADD_FAILURE() << what << " at " << i << ": " << a[i] << " vs " << b[i];
    diff += !same;
  }
  EXPECT_EQ(diff, 0) << what;
}

TEST(GeluKernel, ContiguousKernelMatchesTheStridedPathForwardAndBackward) {
  const std::vector<float> v = inputs();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor x = from_vector<float>(v, {37, 1500}).to(dt);
    x.set_requires_grad(true);
    Tensor x_transposed = x.detach().transpose(0, 1).contiguous();  // same values, [1500, 37]
    x_transposed.set_requires_grad(true);
    const Tensor xt = x_transposed.transpose(0, 1);  // a strided [37, 1500] view
    ASSERT_FALSE(xt.is_contiguous());
    const Tensor y = gelu(x), yt = gelu(xt);
    expect_same_bits(values(y), values(yt), dtype_name(dt).data());
    const Tensor g = from_vector<float>(std::vector<float>(v.rbegin(), v.rend()), {37, 1500}).to(dt);
    y.backward(g);
    yt.backward(g.transpose(0, 1).contiguous().transpose(0, 1));  // a strided gradient: the map path
    expect_same_bits(values(x.grad()), values(x_transposed.grad().transpose(0, 1)), dtype_name(dt).data());
  }
}

TEST(GeluKernel, Avx2BuildMatchesTheDispatchedBuild) {
  std::vector<float> x = inputs();
  x.resize(x.size() - 3);  // a length that is not a multiple of any vector width
  const std::vector<float> g(x.rbegin(), x.rend());
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y1(x.size()), y2(x.size()), d1(x.size()), d2(x.size());
  cpu::gelu_erf_forward<float>(x.data(), y1.data(), n);
  cpu::gelu_erf_forward_avx2(x.data(), y2.data(), n);
  cpu::gelu_erf_backward<float>(g.data(), x.data(), d1.data(), n);
  cpu::gelu_erf_backward_avx2(g.data(), x.data(), d2.data(), n);
  expect_same_bits(std::vector<double>(y1.begin(), y1.end()), std::vector<double>(y2.begin(), y2.end()), "forward");
  expect_same_bits(std::vector<double>(d1.begin(), d1.end()), std::vector<double>(d2.begin(), d2.end()), "backward");
}

}  // namespace
}  // namespace mantissa
