// scaled_dot_product_attention: PyTorch's causal attention (tests/golden/ops.h5), the mask, and autocast.
#include "ops/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

double max_rel_err(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(DType::kF64).contiguous(), w = want.to(DType::kF64).contiguous();
  double scale = 0, err = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    scale = std::max(scale, std::abs(w.data<double>()[i]));
    err = std::max(err, std::abs(g.data<double>()[i] - w.data<double>()[i]));
  }
  return err / scale;
}

void check_golden(DType dtype, double tol) {
  testing::GoldenFile f("ops.h5");
  const std::string g = "/causal_attention/";
  Tensor q = f.tensor(g + "input_0", dtype).set_requires_grad(true);
  Tensor k = f.tensor(g + "input_1", dtype).set_requires_grad(true);
  Tensor v = f.tensor(g + "input_2", dtype).set_requires_grad(true);
  Tensor out = scaled_dot_product_attention(q, k, v, {.mask = AttentionMask::kCausal});
  EXPECT_LT(max_rel_err(out, f.tensor(g + "output")), tol);
  out.backward(f.tensor(g + "grad_output", dtype));
  EXPECT_LT(max_rel_err(q.grad(), f.tensor(g + "grad_input_0")), tol);
  EXPECT_LT(max_rel_err(k.grad(), f.tensor(g + "grad_input_1")), tol);
  EXPECT_LT(max_rel_err(v.grad(), f.tensor(g + "grad_input_2")), tol);
}

TEST(Attention, CausalMatchesPyTorchF64) { check_golden(DType::kF64, 1e-10); }

// f32: two GEMMs (k = 4 and k = 6) and a softmax over 6 entries, each a few ulp (~1e-7) relative to
// the tensor's largest value; 1e-5 leaves room for the gradient's extra products.
TEST(Attention, CausalMatchesPyTorchF32) { check_golden(DType::kF32, 1e-5); }

TEST(Attention, CausalMaskHidesTheFuture) {
  // Changing a later key/value must not change an earlier query's output.
  Generator gen(7);
  Tensor q = randn({1, 2, 5, 8}, {}, &gen), k = randn({1, 2, 5, 8}, {}, &gen), v = randn({1, 2, 5, 8}, {}, &gen);
  Tensor a = scaled_dot_product_attention(q, k, v, {.mask = AttentionMask::kCausal});
  Tensor v2 = v.clone();
  fill_(v2.narrow(2, 3, 2), 100.0);
  Tensor b = scaled_dot_product_attention(q, k, v2, {.mask = AttentionMask::kCausal});
  EXPECT_EQ(max_rel_err(a.narrow(2, 0, 3), b.narrow(2, 0, 3)), 0.0);
  EXPECT_GT(max_rel_err(a.narrow(2, 3, 2), b.narrow(2, 3, 2)), 0.1);
}

TEST(Attention, AutocastRunsInLowerPrecisionAndGivesF32Grads) {
  Generator gen(3);
  Tensor q = randn({2, 4, 8}, {}, &gen).set_requires_grad(true);
  Tensor k = randn({2, 4, 8}, {}, &gen), v = randn({2, 4, 8}, {}, &gen);
  Tensor out;
  {
    amp::AutocastGuard guard({.dtype = DType::kBF16});
    out = scaled_dot_product_attention(q, k, v, {.mask = AttentionMask::kCausal});
  }
  EXPECT_EQ(out.dtype(), DType::kBF16);
  sum(out.to(DType::kF32)).backward();
  EXPECT_EQ(q.grad().dtype(), DType::kF32);
  // bf16 keeps 8 significant bits: the result is the f32 attention within a few bf16 ulps.
  Tensor ref = scaled_dot_product_attention(q, k, v, {.mask = AttentionMask::kCausal});
  EXPECT_LT(max_rel_err(out, ref), 3e-2);
}

TEST(Attention, ShapeErrorsNameTheArguments) {
  Tensor q = zeros({2, 4, 8}), k = zeros({2, 4, 6}), v = zeros({2, 4, 8});
  try {
    scaled_dot_product_attention(q, k, v);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q [2, 4, 8] and k [2, 4, 6] differ in the last (head) dim"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mantissa
