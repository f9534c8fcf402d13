// linear_act: the activation in the GEMM's epilogue against linear then the activation's op (f32 across the
// tile schedule's shapes, f16/bf16 rounding as the composed ops do), its backward and bias gradient, create_graph,
// autocast, NaN, bad arguments, and the Sequential and GPT layers that use it.
#include <gtest/gtest.h>

#include <cmath>
#include <omp.h>
#include <string>
#include <tuple>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/gemm_cpu.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "tests/ops/nn_testing.h"
#include "tests/support/gradcheck.h"

namespace mantissa {
namespace {

constexpr Activation kActs[] = {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh};

// max |got - want| / max |want|, in f64.
double rel_err(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(DType::kF64).contiguous(), w = want.to(DType::kF64).contiguous();
  EXPECT_EQ(g.shape(), w.shape());
  double scale = 1e-30, err = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    scale = std::max(scale, std::abs(w.data<double>()[i]));
    err = std::max(err, std::abs(g.data<double>()[i] - w.data<double>()[i]));
  }
  return err / scale;
}

int64_t differing(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(DType::kF64).contiguous(), y = b.to(DType::kF64).contiguous();
  int64_t n = 0;
  for (int64_t i = 0; i < x.numel(); ++i) n += x.data<double>()[i] != y.data<double>()[i];
  return n;
}

struct Problem {
  Tensor x, w, b;
};

Problem problem(const Shape& x_shape, int64_t out, DType dtype, uint64_t seed, bool bias = true) {
  Generator gen(seed);
  const int64_t in = x_shape.back();
  Problem p;
  p.x = randn(x_shape, {}, &gen).to(dtype);
  p.w = (randn({out, in}, {}, &gen) * (1.0 / std::sqrt(static_cast<double>(in)))).to(dtype);
  if (bias) p.b = randn({out}, {}, &gen).to(dtype);
  return p;
}

// Forward and every gradient of linear_act and of the composed ops, for one problem and upstream gradient.
struct Results {
  Tensor y, dx, dw, db;
};

Results run(const Problem& p, Activation act, bool fused, uint64_t seed) {
  const Tensor x = p.x.detach().set_requires_grad(true), w = p.w.detach().set_requires_grad(true);
  const Tensor b = p.b.defined() ? p.b.detach().set_requires_grad(true) : Tensor();
  const Tensor y = fused ? linear_act(x, w, b, act) : activate(linear(x, w, b), act);
  Generator gen(seed);
  y.backward(randn(y.shape(), {}, &gen).to(y.dtype()));
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

// f32: the fused op computes what the composed ops do. Shapes cover one threaded GEMM (few rows) and the
// tile schedule (ragged last row and column tiles), with and without a bias.
TEST(LinearAct, F32MatchesComposedAcrossPanels) {
  const std::tuple<Shape, int64_t, bool> cases[] = {{{1, 16}, 8, true},        {{7, 33}, 65, true},
                                                    {{3, 50, 40}, 96, false},  {{1200, 64}, 512, true},
                                                    {{4, 333, 72}, 256, true}, {{2500, 16}, 40, false}};
  for (const auto& [shape, out, bias] : cases) {
    for (Activation act : kActs) {
      SCOPED_TRACE(shape_str(shape) + " out " + std::to_string(out) + " " + std::string(activation_name(act)));
      const Problem p = problem(shape, out, DType::kF32, 11, bias);
      const Results f = run(p, act, true, 5), c = run(p, act, false, 5);
      // The same GEMM sums and formulas; a tile's GEMM may take another kernel than the whole one's, so the
      // sums may differ in order (last bits), nothing more.
      EXPECT_LT(rel_err(f.y, c.y), 1e-6);
      EXPECT_LT(rel_err(f.dx, c.dx), 1e-5);
      EXPECT_LT(rel_err(f.dw, c.dw), 1e-5);
      if (bias) {
        EXPECT_LT(rel_err(f.db, c.db), 1e-5);
      }
    }
  }
}

// f16/bf16 round where linear then the activation's op round (h to T, then act(h) to T), as PyTorch does
// eager and compiled: the composed ops' values. With one threaded GEMM (few rows) the widened GEMM is the one
// linear runs, bit for bit; in tiles, up to the f32 sum order.
TEST(LinearAct, SixteenBitMatchesComposed) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (Activation act : kActs) {
      for (int64_t rows : {int64_t{24}, int64_t{1500}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(activation_name(act)) + " rows " +
                     std::to_string(rows));
        const Problem p = problem({rows, 96}, 320, dtype, 3);
        const Tensor y = linear_act(p.x, p.w, p.b, act);
        ASSERT_EQ(y.dtype(), dtype);
        const Tensor want = activate(linear(p.x, p.w, p.b), act);
        const bool exact = rows == 24 && (dtype == DType::kF16 || cpu::bf16_gemm_path() == cpu::Bf16GemmPath::kWidened);
        if (exact) {
          EXPECT_EQ(differing(y, want), 0);
        } else {  // a different f32 sum order may move a rounding: one ulp, rarely
          EXPECT_LT(rel_err(y, want), dtype == DType::kBF16 ? 1.6e-2 : 2e-3);
          EXPECT_LT(differing(y, want), y.numel() / 50);
        }
      }
    }
  }
}

// The 16-bit backward: dh = g act'(h) rounded to T (the GEMMs' operand); the bias gradient sums those.
TEST(LinearAct, SixteenBitGradientsMatchComposed) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (Activation act : kActs) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::string(activation_name(act)));
      const Problem p = problem({2, 300, 64}, 192, dtype, 8);
      const Results f = run(p, act, true, 2), c = run(p, act, false, 2);
      const double tol = dtype == DType::kBF16 ? 3e-2 : 4e-3;
      EXPECT_LT(rel_err(f.dx, c.dx), tol);
      EXPECT_LT(rel_err(f.dw, c.dw), tol);
      EXPECT_LT(rel_err(f.db, c.db), tol);
    }
  }
}

TEST(LinearAct, GradcheckAndGradgradcheck) {
  for (Activation act : kActs) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(std::string(activation_name(act)) + (bias ? " with bias" : " without bias"));
      const auto fn = [act, bias](const std::vector<Tensor>& in) {
        return linear_act(in[0], in[1], bias ? in[2] : Tensor(), act);
      };
      // Away from ReLU's kink: its derivative there is a choice, not a limit.
      const testing::RandomInputOptions away{.min_abs = 0.05};
      std::vector<Tensor> in = {testing::random_input({2, 3, 4}, 1, away), testing::random_input({5, 4}, 2, away),
                                testing::random_input({5}, 3, away)};
      EXPECT_TRUE(testing::gradcheck(fn, in));
      EXPECT_TRUE(testing::gradgradcheck(fn, in));
    }
  }
}

// The bias gradient sums fixed blocks of rows in order: the same bits on one thread as on two.
TEST(LinearAct, BiasGradientIndependentOfThreads) {
  const Problem p = problem({3000, 24}, 48, DType::kF32, 21);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Results one = run(p, Activation::kGelu, true, 4);
  omp_set_num_threads(2);
  const Results two = run(p, Activation::kGelu, true, 4);
  omp_set_num_threads(saved);
  EXPECT_EQ(differing(one.db, two.db), 0);
  EXPECT_EQ(differing(one.y, two.y), 0);
}

TEST(LinearAct, NanReachesTheOutput) {
  Problem p = problem({4, 8}, 6, DType::kF32, 1);
  p.x.data<float>()[3] = std::nanf("");
  for (Activation act : kActs) {
    const Tensor y = linear_act(p.x, p.w, p.b, act);
    EXPECT_TRUE(std::isnan(y.data<float>()[0])) << activation_name(act);  // row 0 read the NaN
    EXPECT_FALSE(std::isnan(y.data<float>()[6])) << activation_name(act);
  }
}

TEST(LinearAct, AutocastRunsItInLowerPrecision) {
  const Problem p = problem({5, 12}, 7, DType::kF32, 2);
  amp::AutocastGuard guard({.dtype = DType::kBF16});
  const Tensor y = linear_act(p.x, p.w, p.b, Activation::kGelu);
  EXPECT_EQ(y.dtype(), DType::kBF16);
}

TEST(LinearAct, NoneIsLinear) {
  const Problem p = problem({5, 12}, 7, DType::kF32, 2);
  EXPECT_EQ(differing(linear_act(p.x, p.w, p.b, Activation::kNone), linear(p.x, p.w, p.b)), 0);
}

TEST(LinearAct, BadArgumentsAreNamed) {
  const Problem p = problem({5, 12}, 7, DType::kF32, 2);
  const std::string features = testing::error_of([&] { linear_act(p.x, p.w.t(), p.b, Activation::kRelu); });
  EXPECT_NE(features.find("linear_act: input [5, 12] has 12 features"), std::string::npos) << features;
  const std::string dtype = testing::error_of([&] { linear_act(p.x, p.w, p.b.to(DType::kF64), Activation::kRelu); });
  EXPECT_NE(dtype.find("linear_act: expected bias and the matrices to have the same dtype"), std::string::npos)
      << dtype;
}

// Sequential runs Linear + ReLU/GELU as linear_act, except when the activation layer has hooks: both ways
// give the composed result, and a hook sees the activation's own output.
TEST(LinearAct, SequentialFusesLinearAndActivation) {
  Generator gen(9);
  auto net = std::make_shared<Sequential>(std::make_shared<Linear>(6, 10, LinearOptions{.generator = &gen}),
                                          std::make_shared<ReLU>(),
                                          std::make_shared<Linear>(10, 8, LinearOptions{.generator = &gen}),
                                          std::make_shared<GELU>(GeluOptions{.approximate = GeluApproximation::kTanh}),
                                          std::make_shared<Linear>(8, 3, LinearOptions{.generator = &gen}));
  const Tensor x = randn({4, 6}, {}, &gen);
  const Tensor y = net->forward(x);
  const auto l0 = net->at<Linear>(0), l2 = net->at<Linear>(2), l4 = net->at<Linear>(4);
  const Tensor want =
      linear(gelu(linear(relu(linear(x, l0->weight, l0->bias)), l2->weight, l2->bias), GeluApproximation::kTanh),
             l4->weight, l4->bias);
  EXPECT_LT(rel_err(y, want), 1e-6);
  auto pair = std::make_shared<Sequential>(l0, std::make_shared<ReLU>());
  EXPECT_EQ(pair->forward(x).grad_fn()->name(), "LinearActBackward");

  int calls = 0;
  Tensor seen;
  net->at<ReLU>(1)->register_forward_hook(
      [&](Module&, const std::vector<Tensor>&, const std::vector<Tensor>& out) -> HookResult {
        ++calls;
        seen = out[0];
        return {};
      });
  const Tensor hooked = net->forward(x);
  EXPECT_EQ(calls, 1);
  EXPECT_LT(rel_err(seen, relu(linear(x, l0->weight, l0->bias))), 1e-6);
  EXPECT_LT(rel_err(hooked, want), 1e-6);
}

}  // namespace
}  // namespace mantissa
