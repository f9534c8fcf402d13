// add_layer_norm: the residual add and the layer_norm after it in one pass, against the two ops bit for bit
// (values and gradients: the backward is theirs), for matching dtypes and autocast's f32 stream with a
// 16-bit delta; gradcheck and gradgradcheck; bad arguments.
#include <gtest/gtest.h>

#include <string>

#include "framework/autograd.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm.h"
#include "ops/reduce/reduce.h"
#include "tests/ops/nn_testing.h"
#include "tests/support/gradcheck.h"

namespace mantissa {
namespace {

int64_t differing(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.shape(), b.shape());
  const Tensor x = a.to(DType::kF64).contiguous(), y = b.to(DType::kF64).contiguous();
  int64_t n = 0;
  for (int64_t i = 0; i < x.numel(); ++i) n += x.data<double>()[i] != y.data<double>()[i];
  return n;
}

struct Grads {
  Tensor sum, out, dx, ddelta, dw, db;
};

// Both results used downstream (as in a transformer block: the sum is the next residual, out feeds the MLP).
Grads run(DType x_dtype, DType delta_dtype, bool fused) {
  Generator gen(5);
  const int64_t C = 48;
  const Tensor x = randn({3, 7, C}, {}, &gen).to(x_dtype).set_requires_grad(true);
  const Tensor delta = randn({3, 7, C}, {}, &gen).to(delta_dtype).set_requires_grad(true);
  const DType pd = x_dtype == DType::kF64 ? DType::kF64 : DType::kF32;  // f32 parameters with 16-bit inputs
  const Tensor w = (randn({C}, {}, &gen) + 1.0).to(pd).set_requires_grad(true);
  const Tensor b = randn({C}, {}, &gen).to(pd).set_requires_grad(true);
  Tensor s, out;
  if (fused) {
    const AddLayerNorm r = add_layer_norm(x, delta, {C}, w, b);
    s = r.sum;
    out = r.out;
  } else {
    s = x + delta;
    out = layer_norm(s, {C}, w, b);
  }
  const Tensor g1 = randn(s.shape(), {}, &gen).to(s.dtype()), g2 = randn(out.shape(), {}, &gen).to(out.dtype());
  sum(s * g1 + out * g2).backward();
  return {s.detach(), out.detach(), x.grad(), delta.grad(), w.grad(), b.grad()};
}

TEST(AddLayerNorm, EqualsAddThenLayerNormBitForBit) {
  const std::pair<DType, DType> cases[] = {{DType::kF32, DType::kF32},  {DType::kF64, DType::kF64},
                                           {DType::kF16, DType::kF16},  {DType::kBF16, DType::kBF16},
                                           {DType::kF32, DType::kBF16}, {DType::kF32, DType::kF16}};
  for (const auto& [xd, dd] : cases) {
    SCOPED_TRACE(std::string(dtype_name(xd)) + " + " + std::string(dtype_name(dd)));
    const Grads f = run(xd, dd, true), c = run(xd, dd, false);
    EXPECT_EQ(f.sum.dtype(), xd);
    EXPECT_EQ(differing(f.sum, c.sum), 0);
    EXPECT_EQ(differing(f.out, c.out), 0);
    EXPECT_EQ(differing(f.dx, c.dx), 0);
    EXPECT_EQ(differing(f.ddelta, c.ddelta), 0);
    EXPECT_EQ(f.ddelta.dtype(), dd);
    EXPECT_EQ(differing(f.dw, c.dw), 0);
    EXPECT_EQ(differing(f.db, c.db), 0);
  }
}

TEST(AddLayerNorm, GradcheckAndGradgradcheck) {
  const auto fn = [](const std::vector<Tensor>& in) {
    const AddLayerNorm r = add_layer_norm(in[0], in[1], {5}, in[2], in[3]);
    return r.out + r.sum * 0.5;
  };
  const std::vector<Tensor> in = {testing::random_input({2, 3, 5}, 1), testing::random_input({2, 3, 5}, 2),
                                  testing::random_input({5}, 3), testing::random_input({5}, 4)};
  EXPECT_TRUE(testing::gradcheck(fn, in));
  EXPECT_TRUE(testing::gradgradcheck(fn, in));
}

TEST(AddLayerNorm, OtherDtypePairsTakeTheTwoOps) {
  // f16 x with an f32 delta promotes to f32, as add does; the layer_norm then runs on the f32 sum.
  Generator gen(2);
  const Tensor x = randn({4, 8}, {}, &gen).to(DType::kF16), delta = randn({4, 8}, {}, &gen);
  const AddLayerNorm r = add_layer_norm(x, delta, {8});
  EXPECT_EQ(r.sum.dtype(), DType::kF32);
  EXPECT_EQ(differing(r.out, layer_norm(x + delta, {8})), 0);
}

TEST(AddLayerNorm, BadArgumentsAreNamed) {
  using testing::error_of;
  EXPECT_NE(error_of([] {
              add_layer_norm(ones({2, 4}), ones({1, 4}), {4});
            }).find("add_layer_norm: x [2, 4] and delta [1, 4] must have one shape"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              add_layer_norm(ones({2, 4}), ones({2, 4}), {3});
            }).find("add_layer_norm: normalized_shape [3] must be non-empty and equal the last dims"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              add_layer_norm(ones({2, 4}), ones({2, 4}), {4}, ones({3}));
            }).find("add_layer_norm"),
            std::string::npos);
}

}  // namespace
}  // namespace mantissa
