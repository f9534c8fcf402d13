// scaled_dot_product_attention: PyTorch's causal attention (tests/golden/ops.h5), the mask, autocast, and
// the fused kernel against the composed math path (shapes across its tiles, broadcast and strided
// operands, dropout drawing the same words, NaN, create_graph).
#include "ops/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/golden.h"
#include "tests/support/gradcheck.h"

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

// Both paths on one problem, f64: the fused kernel sums scores and products in another order (tiles of 64
// queries by 128 keys, online softmax), so they agree to rounding: 1e-12 relative.
struct Problem {
  Shape q, k, v;
  AttentionMask mask;
};

void expect_fused_matches_math(const Problem& pr, DType dtype, double tol, double dropout_p = 0.0) {
  Generator gen(11);
  Tensor q = randn(pr.q, {.dtype = dtype}, &gen).set_requires_grad(true);
  Tensor k = randn(pr.k, {.dtype = dtype}, &gen).set_requires_grad(true);
  Tensor v = randn(pr.v, {.dtype = dtype}, &gen).set_requires_grad(true);
  Generator fused_gen(99), math_gen(99);
  const Tensor y =
      scaled_dot_product_attention(q, k, v, {.mask = pr.mask, .dropout_p = dropout_p, .generator = &fused_gen});
  Tensor q2 = q.detach().set_requires_grad(true), k2 = k.detach().set_requires_grad(true),
         v2 = v.detach().set_requires_grad(true);
  const Tensor want =
      scaled_dot_product_attention_math(q2, k2, v2, {.mask = pr.mask, .dropout_p = dropout_p, .generator = &math_gen});
  EXPECT_EQ(fused_gen.state(), math_gen.state()) << "the fused op takes as many words as dropout() would";
  EXPECT_LT(max_rel_err(y, want), tol) << shape_str(pr.q) << " " << shape_str(pr.k);
  const Tensor g = randn(y.shape(), {.dtype = dtype}, &gen);
  y.backward(g);
  want.backward(g);
  EXPECT_LT(max_rel_err(q.grad(), q2.grad()), tol) << "dq";
  EXPECT_LT(max_rel_err(k.grad(), k2.grad()), tol) << "dk";
  EXPECT_LT(max_rel_err(v.grad(), v2.grad()), tol) << "dv";
}

TEST(FusedAttention, MatchesTheMathPathAcrossTiles) {
  for (AttentionMask mask : {AttentionMask::kNone, AttentionMask::kCausal}) {
    // One tile; L and S across the 64-query and 128-key tiles; L > S and L < S; D != Dv; 2-d inputs.
    expect_fused_matches_math({{2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, mask}, DType::kF64, 1e-12);
    expect_fused_matches_math({{1, 2, 130, 24}, {1, 2, 200, 24}, {1, 2, 200, 40}, mask}, DType::kF64, 1e-12);
    expect_fused_matches_math({{2, 300, 16}, {2, 129, 16}, {2, 129, 16}, mask}, DType::kF64, 1e-12);
    expect_fused_matches_math({{7, 3}, {7, 3}, {7, 5}, mask}, DType::kF64, 1e-12);
  }
}

TEST(FusedAttention, BroadcastsBatchDims) {
  // k and v shared across the batch (multi-query style): their gradients sum over it.
  expect_fused_matches_math({{3, 2, 9, 8}, {1, 2, 9, 8}, {2, 9, 8}, AttentionMask::kCausal}, DType::kF64, 1e-12);
}

TEST(FusedAttention, DropoutDropsWhatTheComposedPathDrops) {
  // Same generator state on both sides: the same weights dropped, the generator left in the same state.
  expect_fused_matches_math({{2, 2, 70, 8}, {2, 2, 150, 8}, {2, 2, 150, 8}, AttentionMask::kNone}, DType::kF64, 1e-12,
                            0.3);
  expect_fused_matches_math({{2, 2, 70, 8}, {2, 2, 70, 8}, {2, 2, 70, 8}, AttentionMask::kCausal}, DType::kF64, 1e-12,
                            0.5);
  // f32: the same mask, so the two agree to f32 rounding.
  expect_fused_matches_math({{1, 3, 40, 16}, {1, 3, 40, 16}, {1, 3, 40, 16}, AttentionMask::kCausal}, DType::kF32, 1e-5,
                            0.2);
}

TEST(FusedAttention, ReadsHeadViewsInPlace) {
  // The GPT's q, k and v: head views [B, H, T, D] of one [B, T, 3C] projection, none of them contiguous.
  Generator gen(5);
  const int64_t B = 2, T = 70, H = 4, D = 8, C = H * D;
  Tensor qkv = randn({B, T, 3 * C}, {.dtype = DType::kF64}, &gen).set_requires_grad(true);
  auto heads = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2); };
  const Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), {.mask = AttentionMask::kCausal});
  Tensor qkv2 = qkv.detach().set_requires_grad(true);
  auto heads2 = [&](int64_t i) { return qkv2.narrow(2, i * C, C).reshape({B, T, H, D}).transpose(1, 2); };
  const Tensor want = scaled_dot_product_attention_math(heads2(0).contiguous(), heads2(1).contiguous(),
                                                        heads2(2).contiguous(), {.mask = AttentionMask::kCausal});
  EXPECT_LT(max_rel_err(y, want), 1e-12);
  const Tensor g = randn(y.shape(), {.dtype = DType::kF64}, &gen);
  y.backward(g);
  want.backward(g);
  EXPECT_LT(max_rel_err(qkv.grad(), qkv2.grad()), 1e-12);
}

TEST(FusedAttention, Bf16IsCloserToExactThanTheComposedPath) {
  // Scores, softmax and sums in f32, P rounded only as a GEMM operand, one rounding at the output: the
  // fused op's bf16 output is nearer the f64 attention of the same bf16 inputs than the composed path,
  // which rounds scores, weights and products to bf16. Norm-wise: ||y - exact|| / ||exact||.
  Generator gen(21);
  const Tensor q = randn({2, 4, 200, 32}, {}, &gen).to(DType::kBF16),
               k = randn({2, 4, 200, 32}, {}, &gen).to(DType::kBF16),
               v = randn({2, 4, 200, 32}, {}, &gen).to(DType::kBF16);
  const AttentionOptions o{.mask = AttentionMask::kCausal};
  const Tensor exact = scaled_dot_product_attention_math(q.to(DType::kF64), k.to(DType::kF64), v.to(DType::kF64), o);
  const auto norm_err = [&](const Tensor& y) {
    const Tensor d = y.to(DType::kF64) - exact;
    return std::sqrt(sum(d * d).item() / sum(exact * exact).item());
  };
  const double fused = norm_err(scaled_dot_product_attention(q, k, v, o));
  const double composed = norm_err(scaled_dot_product_attention_math(q, k, v, o));
  std::printf("bf16 attention, norm-wise error against f64: fused %.3e, composed %.3e\n", fused, composed);
  EXPECT_LT(fused, 0x1p-8) << "about one bf16 rounding";
  EXPECT_LT(fused, composed / 1.5) << "fused " << fused << ", composed " << composed;
}

TEST(FusedAttention, NanStaysInItsRow) {
  Tensor q = ones({1, 4, 4}), k = ones({1, 4, 4}), v = ones({1, 4, 4});
  fill_(q.select(1, 2).select(1, 0), NAN);  // query 2
  const Tensor y = scaled_dot_product_attention(q, k, v, {.mask = AttentionMask::kCausal}).contiguous();
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(std::isnan(y.data<float>()[i * 4]), i == 2) << "row " << i;
  }
}

TEST(FusedAttention, NoKeysGiveZeros) {
  const Tensor y = scaled_dot_product_attention(ones({2, 3, 4}), zeros({2, 0, 4}), zeros({2, 0, 5}));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(sum(y * y).item(), 0.0);
}

TEST(FusedAttention, GradcheckWithDropout) {
  // A fresh generator per call keeps the function deterministic, so central differences apply.
  const auto fn = [](const std::vector<Tensor>& x) {
    Generator g(3);
    return scaled_dot_product_attention(x[0], x[1], x[2],
                                        {.mask = AttentionMask::kCausal, .dropout_p = 0.4, .generator = &g});
  };
  const std::vector<Tensor> in = {testing::random_input({2, 5, 3}, 1), testing::random_input({2, 5, 3}, 2),
                                  testing::random_input({2, 5, 4}, 3)};
  EXPECT_TRUE(testing::gradcheck(fn, in));
  EXPECT_TRUE(testing::gradgradcheck(fn, in));
}

TEST(FusedAttention, BadArgumentsAreNamed) {
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor a = zeros({2, 4, 8});
  EXPECT_NE(message([&] {
              scaled_dot_product_attention(a, a.to(DType::kF64), a);
            }).find("q, k and v must have one dtype, got f32, f64 and f32"),
            std::string::npos);
  EXPECT_NE(message([&] {
              scaled_dot_product_attention(a, a, a, {.dropout_p = 1.5});
            }).find("dropout_p must be in [0, 1], got 1.5"),
            std::string::npos);
  EXPECT_NE(message([&] { scaled_dot_product_attention(a, a, a, {.scale = -1.0}); }).find("scale must be finite"),
            std::string::npos);
}

}  // namespace
}  // namespace mantissa
