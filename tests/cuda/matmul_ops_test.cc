// The matrix-product ops on CUDA tensors (skipped without a device): mm, bmm, matmul, linear, addmm,
// baddbmm and dot against the same ops on the CPU in f32, f16 and bf16, with transposed and strided
// (non-contiguous) operands and odd sizes, and the backward of linear and bmm. Each GPU output is checked
// against the bound of tests/cuda/blas_test_support.h, with S = the same op on |inputs| in f64 on the CPU.
// These need CUDA tensors (the allocator and copies of the CUDA backend's core).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "tests/cuda/blas_test_support.h"
#include "tests/ops/op_test_support.h"

namespace mantissa {
namespace {

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// Best effort against unwritten outputs: leave blocks of the output's size, filled with nan, in the
// device allocator's cache just before the op runs, so that its output most likely reuses one of them.
void poison_device_cache(const Shape& shape, DType dtype) {
  for (int i = 0; i < 2; ++i) {
    (void)full(shape, std::numeric_limits<double>::quiet_NaN(), {.dtype = dtype, .device = cuda(0)});
  }
}

// Runs op on the CPU and on the GPU with the same dtype-`dt` inputs (made from f64 `inputs`), and holds
// the GPU result to the bound with sums of `depth` products; S = op on |inputs| in f64.
void expect_matches_cpu(const std::string& what, const Op& op, const std::vector<Tensor>& inputs, DType dt,
                        int64_t depth, bool sum_rounded_first = false) {
  SCOPED_TRACE(what + " " + std::string(dtype_name(dt)));
  std::vector<Tensor> cpu_in, gpu_in, abs_in;
  for (const Tensor& t : inputs) {
    const Tensor c = t.to(dt);
    cpu_in.push_back(c);
    gpu_in.push_back(c.to(cuda(0)));
    abs_in.push_back(abs(c.to(DType::kF64)));
  }
  const Tensor ref = op(cpu_in);
  poison_device_cache(ref.shape(), dt);
  const Tensor out = op(gpu_in);
  ASSERT_EQ(out.device(), cuda(0));
  ASSERT_EQ(out.dtype(), dt);
  ASSERT_EQ(out.shape(), ref.shape());
  const Tensor s = op(abs_in);
  EXPECT_EQ(testing::count_beyond_bound(testing::values(out.to(kCPU)), testing::values(ref), testing::values(s), depth,
                                        dt, 1.0, sum_rounded_first),
            0);
}

Tensor rnd(const Shape& shape, uint64_t seed) { return testing::random_tensor(shape, seed); }

class CudaMatmulOps : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMatmulOps, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Sizes are odd (not multiples of 8): m 37, k 29, n 53.
TEST_P(CudaMatmulOps, MmWithPlainTransposedAndStridedOperands) {
  MT_SKIP_WITHOUT_CUDA();
  const DType dt = GetParam();
  expect_matches_cpu(
      "mm", [](const auto& v) { return mm(v[0], v[1]); }, {rnd({37, 29}, 1), rnd({29, 53}, 2)}, dt, 29);
  // a^T and b^T as views of contiguous matrices: transpose flags, no copies.
  expect_matches_cpu(
      "mm transposed", [](const auto& v) { return mm(v[0].t(), v[1].t()); }, {rnd({29, 37}, 3), rnd({53, 29}, 4)}, dt,
      29);
  // Every second column: neither dim unit-stride, so the op copies (contiguous()).
  expect_matches_cpu(
      "mm strided", [](const auto& v) { return mm(v[0].slice(1, 0, 58, 2), v[1]); },
      {rnd({37, 58}, 5), rnd({29, 53}, 6)}, dt, 29);
  // A row block of a wider matrix: a padded leading dim at an odd element offset (misaligned pointer).
  expect_matches_cpu(
      "mm offset view", [](const auto& v) { return mm(v[0].narrow(1, 1, 29), v[1]); },
      {rnd({37, 33}, 7), rnd({29, 53}, 8)}, dt, 29);
}

TEST_P(CudaMatmulOps, BmmAndBaddbmm) {
  MT_SKIP_WITHOUT_CUDA();
  const DType dt = GetParam();
  expect_matches_cpu(
      "bmm", [](const auto& v) { return bmm(v[0], v[1]); }, {rnd({3, 17, 31}, 11), rnd({3, 31, 9}, 12)}, dt, 31);
  expect_matches_cpu(
      "bmm transposed", [](const auto& v) { return bmm(v[0].transpose(1, 2), v[1]); },
      {rnd({3, 31, 17}, 13), rnd({3, 31, 9}, 14)}, dt, 31);
  // beta * bias + alpha * product, the bias broadcast from [17, 1]; alpha and beta positive so that the
  // same op on |inputs| gives S.
  expect_matches_cpu(
      "baddbmm", [](const auto& v) { return baddbmm(v[0], v[1], v[2], 0.5, 2.0); },
      {rnd({17, 1}, 15), rnd({3, 17, 31}, 16), rnd({3, 31, 9}, 17)}, dt, 32);
}

TEST_P(CudaMatmulOps, AddmmLinearMatmulDot) {
  MT_SKIP_WITHOUT_CUDA();
  const DType dt = GetParam();
  // A full [m, n] bias (broadcast-copied, beta) and a row bias [n] with beta 1 (the epilogue path). In bf16 the GPU
  // rounds the product to bf16 before it adds a row bias (cuBLASLt's epilogue: bench/gpu/2026-11-28-run3).
  const bool bf16 = dt == DType::kBF16;
  expect_matches_cpu(
      "addmm full bias", [](const auto& v) { return addmm(v[0], v[1], v[2], 0.25, 1.5); },
      {rnd({21, 13}, 21), rnd({21, 45}, 22), rnd({45, 13}, 23)}, dt, 46);
  expect_matches_cpu(
      "addmm row bias", [](const auto& v) { return addmm(v[0], v[1], v[2]); },
      {rnd({13}, 24), rnd({21, 45}, 25), rnd({45, 13}, 26)}, dt, 46, bf16);
  expect_matches_cpu(
      "linear", [](const auto& v) { return linear(v[0], v[1], v[2]); },
      {rnd({2, 7, 45}, 27), rnd({19, 45}, 28), rnd({19}, 29)}, dt, 46, bf16);
  expect_matches_cpu(
      "linear no bias", [](const auto& v) { return linear(v[0], v[1]); }, {rnd({7, 45}, 30), rnd({19, 45}, 31)}, dt,
      45);
  expect_matches_cpu(
      "matmul broadcast", [](const auto& v) { return matmul(v[0], v[1]); },
      {rnd({2, 1, 5, 11}, 32), rnd({3, 11, 6}, 33)}, dt, 11);
  expect_matches_cpu(
      "matmul vector", [](const auto& v) { return matmul(v[0], v[1]); }, {rnd({4, 5, 11}, 34), rnd({11}, 35)}, dt, 11);
  expect_matches_cpu(
      "dot strided", [](const auto& v) { return dot(v[0].slice(0, 0, 202, 2), v[1]); },
      {rnd({202}, 36), rnd({101}, 37)}, dt, 101);
}

// The backward of linear (GemmBackward: g @ W, g^T @ x, sum of g) on the GPU against the CPU. S for each
// gradient is that gradient of the same graph on |x|, |W|, |b| with |g| in f64.
TEST_P(CudaMatmulOps, LinearBackward) {
  MT_SKIP_WITHOUT_CUDA();
  const DType dt = GetParam();
  const Tensor x = rnd({6, 23}, 41).to(dt), w = rnd({17, 23}, 42).to(dt), b = rnd({17}, 43).to(dt);
  const Tensor g = rnd({6, 17}, 44).to(dt);
  auto grads = [](const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g0) {
    const Tensor xl = x0.detach().set_requires_grad(true), wl = w0.detach().set_requires_grad(true),
                 bl = b0.detach().set_requires_grad(true);
    linear(xl, wl, bl).backward(g0);
    return std::vector<Tensor>{xl.grad(), wl.grad(), bl.grad()};
  };
  const std::vector<Tensor> ref = grads(x, w, b, g);
  const std::vector<Tensor> out = grads(x.to(cuda(0)), w.to(cuda(0)), b.to(cuda(0)), g.to(cuda(0)));
  const std::vector<Tensor> s =
      grads(abs(x.to(DType::kF64)), abs(w.to(DType::kF64)), abs(b.to(DType::kF64)), abs(g.to(DType::kF64)));
  const int64_t depth[3] = {17, 6, 6};  // dx: over out features; dW and db: over the rows
  const char* names[3] = {"dx", "dW", "db"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    ASSERT_EQ(out[i].device(), cuda(0));
    ASSERT_EQ(out[i].dtype(), dt);
    EXPECT_EQ(testing::count_beyond_bound(testing::values(out[i].to(kCPU)), testing::values(ref[i]),
                                          testing::values(s[i]), depth[i], dt),
              0);
  }
}

}  // namespace
}  // namespace mantissa
