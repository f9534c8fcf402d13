// mm, bmm, matmul, linear, addmm, baddbmm: every op in f32, f64, f16 and bf16 against a naive f64
// reference; backward by central differences in f64 (non-contiguous and broadcast inputs included);
// 16-bit gradients against the f64 ones; PyTorch's golden values; error messages.
#include "ops/matmul/matmul.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "ops/cpu/loops.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

using ::testing::HasSubstr;

Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  return from_vector<double>(v, shape).to(dtype);
}

std::vector<double> values(const Tensor& t) {
  Tensor c = t.detach().to(kFloat64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// Naive f64 matmul with torch.matmul's rules (1-D promotion, broadcast batch dims).
Tensor ref_matmul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in.detach().to(kFloat64), b = b_in.detach().to(kFloat64);
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  if (a_vec) a = a.unsqueeze(0);
  if (b_vec) b = b.unsqueeze(1);
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const Shape batch = cpu::broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                                            Shape(b.shape().begin(), b.shape().end() - 2), "ref");
  Shape fa = batch, fb = batch, out_shape = batch;
  fa.insert(fa.end(), {m, k});
  fb.insert(fb.end(), {k, n});
  const std::vector<double> av = values(a.expand(fa)), bv = values(b.expand(fb));
  std::vector<double> out(static_cast<size_t>(shape_numel(batch) * m * n));
  for (int64_t z = 0; z < shape_numel(batch); ++z) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) s += av[(z * m + i) * k + l] * bv[(z * k + l) * n + j];
        out[(z * m + i) * n + j] = s;
      }
    }
  }
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  return from_vector<double>(out, out_shape);
}

Tensor f64(const Tensor& t) { return t.detach().to(kFloat64); }

// One test case: input shapes, the op (views applied inside, so inputs may be used non-contiguously),
// and its reference written with ref_matmul and f64 elementwise ops.
struct Case {
  std::string name;
  std::vector<Shape> shapes;
  std::function<Tensor(const std::vector<Tensor>&)> op;
  std::function<Tensor(const std::vector<Tensor>&)> ref;
};

std::vector<Case> cases() {
  using V = const std::vector<Tensor>&;
  return {
      {"mm", {{13, 17}, {17, 11}}, [](V x) { return mm(x[0], x[1]); }, [](V x) { return ref_matmul(x[0], x[1]); }},
      {"mm_transposed",
       {{17, 13}, {11, 17}},
       [](V x) { return mm(x[0].t(), x[1].t()); },
       [](V x) { return ref_matmul(f64(x[0]).t(), f64(x[1]).t()); }},
      {"mm_sliced",
       {{13, 34}, {20, 11}},  // a: every other column (no unit stride); b: rows 2..18
       [](V x) { return mm(x[0].slice(1, 0, 34, 2), x[1].narrow(0, 2, 17)); },
       [](V x) { return ref_matmul(f64(x[0]).slice(1, 0, 34, 2), f64(x[1]).narrow(0, 2, 17)); }},
      {"bmm", {{3, 9, 7}, {3, 7, 5}}, [](V x) { return bmm(x[0], x[1]); }, [](V x) { return ref_matmul(x[0], x[1]); }},
      {"bmm_transposed",
       {{3, 7, 9}, {3, 5, 7}},
       [](V x) { return bmm(x[0].transpose(1, 2), x[1].transpose(1, 2)); },
       [](V x) { return ref_matmul(f64(x[0]).transpose(1, 2), f64(x[1]).transpose(1, 2)); }},
      {"bmm_permuted_batch",
       {{9, 3, 7}, {3, 7, 5}},  // a's batch stride (7) is below its row stride (21)
       [](V x) {
         return bmm(x[0].permute({1, 0, 2}), x[1]);
       },
       [](V x) {
         return ref_matmul(f64(x[0]).permute({1, 0, 2}), x[1]);
       }},
      {"matmul_dot", {{19}, {19}}, [](V x) { return matmul(x[0], x[1]); }, [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_vec_mat",
       {{7}, {7, 5}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_mat_vec",
       {{6, 7}, {7}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_batch_vec",
       {{2, 3, 6, 7}, {7}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_vec_batch",
       {{7}, {3, 7, 5}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_fold",
       {{2, 3, 4, 5}, {5, 6}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_mat_batch",
       {{4, 5}, {2, 5, 6}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_broadcast_both",
       {{2, 1, 4, 5}, {3, 5, 6}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_batch_one",
       {{3, 4, 5}, {1, 5, 6}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_one_batch",
       {{1, 4, 5}, {3, 5, 6}},
       [](V x) { return matmul(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], x[1]); }},
      {"matmul_transposed_batch",
       {{2, 3, 5, 4}, {5, 6}},  // a^T per batch: no fold, transpose flag
       [](V x) { return matmul(x[0].transpose(-1, -2), x[1]); },
       [](V x) { return ref_matmul(f64(x[0]).transpose(-1, -2), x[1]); }},
      {"linear",
       {{4, 3, 7}, {5, 7}, {5}},
       [](V x) { return linear(x[0], x[1], x[2]); },
       [](V x) { return add(ref_matmul(x[0], f64(x[1]).t()), f64(x[2])); }},
      {"linear_no_bias",
       {{6, 7}, {5, 7}},
       [](V x) { return linear(x[0], x[1]); },
       [](V x) { return ref_matmul(x[0], f64(x[1]).t()); }},
      {"linear_vector",
       {{7}, {5, 7}, {5}},
       [](V x) { return linear(x[0], x[1], x[2]); },
       [](V x) { return add(ref_matmul(x[0], f64(x[1]).t()), f64(x[2])); }},
      {"addmm",
       {{11}, {13, 17}, {17, 11}},
       [](V x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); },
       [](V x) { return add(mul(f64(x[0]), 0.5), mul(ref_matmul(x[1], x[2]), 2.0)); }},
      {"addmm_full_bias_transposed",
       {{13, 11}, {17, 13}, {17, 11}},
       [](V x) { return addmm(x[0], x[1].t(), x[2].t().contiguous().t(), 1.25, 0.75); },
       [](V x) { return add(mul(f64(x[0]), 1.25), mul(ref_matmul(f64(x[1]).t(), x[2]), 0.75)); }},
      {"baddbmm",
       {{3, 1, 5}, {3, 9, 7}, {3, 7, 5}},
       [](V x) { return baddbmm(x[0], x[1], x[2], 1.5, 0.25); },
       [](V x) { return add(mul(f64(x[0]), 1.5), mul(ref_matmul(x[1], x[2]), 0.25)); }},
  };
}

std::vector<Tensor> make_inputs(const Case& c, DType dtype, uint32_t seed) {
  std::vector<Tensor> ins;
  for (const Shape& s : c.shapes) ins.push_back(random_tensor(s, dtype, seed++));
  return ins;
}

// Unit roundoff of a dtype's significand (half an ulp at 1).
double unit_roundoff(DType d) {
  switch (d) {
    case DType::kF64: return std::ldexp(1.0, -53);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kBF16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

class MatmulDTypes : public ::testing::TestWithParam<DType> {};

// Forward: |out - ref| <= u_out |ref| + k u_acc sum|a||b|: one rounding to the output dtype plus the
// standard bound for a k-term dot product accumulated in fp32 (f64 for f64). The magnitude term is the
// same reference evaluated on |inputs| (every case uses positive alpha and beta).
TEST_P(MatmulDTypes, ForwardMatchesF64Reference) {
  const DType dt = GetParam();
  const double u_acc = dt == kFloat64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> ins = make_inputs(c, dt, 7);
    Tensor out = c.op(ins);
    ASSERT_EQ(out.dtype(), dt);
    std::vector<Tensor> abs_ins;
    for (const Tensor& t : ins) abs_ins.push_back(abs(f64(t)));
    const Tensor want = c.ref(ins), mag = c.ref(abs_ins);
    ASSERT_EQ(out.shape(), want.shape());
    const std::vector<double> got = values(out), ref = values(want), m = values(mag);
    const double k = 20;  // every case's inner size (plus bias terms) is below 20
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::abs(got[i] - ref[i]), unit_roundoff(dt) * std::abs(ref[i]) + k * u_acc * m[i] + 1e-300)
          << "element " << i << ": got " << got[i] << ", want " << ref[i];
    }
  }
}

// Backward in every dtype: grads have each input's shape and dtype, and match the f64 grads of the same
// (rounded) inputs to 4 roundings of the dtype relative to the largest gradient (a 16-bit grad is a
// GEMM rounded once, plus one more rounding where a broadcast input's grad is summed).
TEST_P(MatmulDTypes, BackwardMatchesF64Grads) {
  const DType dt = GetParam();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> ins = make_inputs(c, dt, 11), ins64;
    for (Tensor& t : ins) {
      ins64.push_back(f64(t).set_requires_grad(true));
      t.set_requires_grad(true);
    }
    Tensor out = c.op(ins);
    Tensor w = random_tensor(out.shape(), dt, 99);
    sum(mul(out, w)).backward();
    sum(mul(c.op(ins64), f64(w))).backward();
    for (size_t i = 0; i < ins.size(); ++i) {
      const Tensor& g = ins[i].grad();
      ASSERT_TRUE(g.defined()) << "input " << i;
      EXPECT_EQ(g.shape(), ins[i].shape());
      EXPECT_EQ(g.dtype(), dt);
      const std::vector<double> got = values(g), want = values(ins64[i].grad());
      double scale = 0;
      for (double v : want) scale = std::max(scale, std::abs(v));
      for (size_t j = 0; j < got.size(); ++j) {
        ASSERT_NEAR(got[j], want[j], 4 * unit_roundoff(dt) * scale + 1e-300) << "input " << i << " element " << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matmul, MatmulDTypes, ::testing::Values(kFloat32, kFloat64, kFloat16, kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Central differences in f64 of L = sum(w * op(x)). The ops are linear in each input, so the only error
// is cancellation: about 1e-16 * |L| / eps, far below the 1e-7 tolerance.
TEST(MatmulGradcheck, CentralDifferencesF64) {
  constexpr double eps = 1e-6;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> ins = make_inputs(c, kFloat64, 3);
    for (Tensor& t : ins) t.set_requires_grad(true);
    const Tensor w = random_tensor(c.op(ins).shape(), kFloat64, 5);
    sum(mul(c.op(ins), w)).backward();
    NoGradGuard no_grad;
    auto loss = [&] { return sum(mul(c.op(ins), w)).item(); };
    for (size_t i = 0; i < ins.size(); ++i) {
      double* p = ins[i].data<double>();
      const std::vector<double> analytic = values(ins[i].grad());
      for (int64_t j = 0; j < ins[i].numel(); ++j) {
        const double x = p[j];
        p[j] = x + eps;
        const double up = loss();
        p[j] = x - eps;
        const double down = loss();
        p[j] = x;
        ASSERT_NEAR(analytic[static_cast<size_t>(j)], (up - down) / (2 * eps), 1e-7)
            << "input " << i << " element " << j;
      }
    }
  }
}

// linear's weight arrives as a transpose flag; its gradient is computed in the weight's own layout, so
// the leaf gets a contiguous [out, in] grad.
TEST(Matmul, LinearWeightGradIsContiguous) {
  Tensor x = random_tensor({8, 6}, kFloat32, 1).set_requires_grad(true);
  Tensor weight = random_tensor({4, 6}, kFloat32, 2).set_requires_grad(true);
  sum(linear(x, weight)).backward();
  EXPECT_TRUE(weight.grad().is_contiguous());
  EXPECT_EQ(weight.grad().shape(), (Shape{4, 6}));
}

// Integer-valued operands: every product and partial sum is exact in fp32, so the fp32-accumulated
// result is the exact sum, and a 16-bit output must be that sum rounded once (bit for bit). Sums reach
// a few thousand, beyond the integers f16 (2048) and bf16 (256) hold, so a rounding of partial sums
// would show.
TEST(Matmul, SixteenBitOutputIsTheFp32SumRoundedOnce) {
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::mt19937 gen(1);
    std::uniform_int_distribution<int> dist(-8, 8);
    auto ints = [&](int64_t n) {
      std::vector<double> v(static_cast<size_t>(n));
      for (double& x : v) x = dist(gen);
      return v;
    };
    const int64_t m = 64, k = 96, n = 80;
    const std::vector<double> av = ints(m * k), bv = ints(k * n), cv = ints(n);
    const Tensor a = from_vector<double>(av, {m, k}).to(dt), b = from_vector<double>(bv, {k, n}).to(dt);
    const Tensor bias = from_vector<double>(cv, {n}).to(dt);
    const std::vector<double> got = values(addmm(bias, a, b, 1.0, 2.0));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double exact = cv[static_cast<size_t>(j)];
        for (int64_t l = 0; l < k; ++l)
          exact += 2.0 * av[static_cast<size_t>(i * k + l)] * bv[static_cast<size_t>(l * n + j)];
        const double rounded = values(full({1}, exact, {.dtype = dt}))[0];  // one f64 -> 16-bit rounding
        ASSERT_EQ(got[static_cast<size_t>(i * n + j)], rounded) << "(" << i << ", " << j << ") exact " << exact;
      }
    }
  }
}

TEST(Matmul, SmallestOnceVersusStepwiseCase) {
  // 256 + 1 + 1: stepwise bf16 rounding gives 256 (257 ties to even), one rounding gives 258.
  const Tensor a = from_vector<float>({256, 1, 1}, {1, 3}).to(kBFloat16);
  const Tensor b = ones({3, 1}, {.dtype = kBFloat16});
  EXPECT_EQ(mm(a, b).item(), 258.0);
  // f16: 2048 + 1 + 1 = 2050 (stepwise: 2048).
  EXPECT_EQ(mm(from_vector<float>({2048, 1, 1}, {1, 3}).to(kFloat16), ones({3, 1}, {.dtype = kFloat16})).item(),
            2050.0);
}

// Under autocast every product runs in the guard's dtype; fp32 leaves still get fp32 grads.
TEST(Matmul, AutocastRunsInLowerPrecision) {
  Tensor x = random_tensor({4, 6}, kFloat32, 1).set_requires_grad(true);
  Tensor w = random_tensor({3, 6}, kFloat32, 2).set_requires_grad(true);
  Tensor bias = random_tensor({3}, kFloat32, 3).set_requires_grad(true);
  Tensor out;
  {
    amp::AutocastGuard guard({.dtype = kBFloat16});
    out = linear(x, w, bias);
    EXPECT_EQ(mm(x, w.t()).dtype(), kBFloat16);
    EXPECT_EQ(matmul(x, w.t()).dtype(), kBFloat16);
    EXPECT_EQ(addmm(bias, x, w.t()).dtype(), kBFloat16);
    EXPECT_EQ(bmm(x.unsqueeze(0), w.t().unsqueeze(0)).dtype(), kBFloat16);
    EXPECT_EQ(baddbmm(bias, x.unsqueeze(0), w.t().unsqueeze(0)).dtype(), kBFloat16);
  }
  EXPECT_EQ(out.dtype(), kBFloat16);
  sum(out).backward();
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(bias.grad().dtype(), kFloat32);
}

TEST(Matmul, ZeroBetaIgnoresNanBias) {
  const Tensor bias = full({2, 2}, std::nan(""));
  const Tensor out = addmm(bias, ones({2, 3}), ones({3, 2}), 0.0, 1.0);
  for (double v : values(out)) EXPECT_EQ(v, 3.0);
}

TEST(Matmul, EmptyShapes) {
  EXPECT_EQ(mm(ones({0, 3}), ones({3, 4})).shape(), (Shape{0, 4}));
  for (double v : values(mm(ones({2, 0}), ones({0, 3})))) EXPECT_EQ(v, 0.0);  // empty sum
  EXPECT_EQ(bmm(ones({0, 2, 3}), ones({0, 3, 4})).shape(), (Shape{0, 2, 4}));
  EXPECT_EQ(matmul(ones({0, 2, 3}), ones({1, 3, 4})).shape(), (Shape{0, 2, 4}));
}

TEST(MatmulGolden, MatchesPyTorch) {
  testing::GoldenFile f("ops.h5");
  struct Op {
    std::string group;
    std::function<Tensor(const std::vector<Tensor>&)> fn;
    int inputs;
  };
  const std::vector<Op> ops = {{"linear", [](const auto& x) { return linear(x[0], x[1], x[2]); }, 3},
                               {"bmm", [](const auto& x) { return bmm(x[0], x[1]); }, 2},
                               {"matmul_broadcast", [](const auto& x) { return matmul(x[0], x[1]); }, 2}};
  // f64 to 1e-10 relative (the reference is PyTorch's f64); f32 to 1e-5 relative to the largest value
  // (inner sizes here are 5 to 7, so the fp32 error is a few ulps).
  for (const Op& op : ops) {
    for (DType dt : {kFloat64, kFloat32}) {
      SCOPED_TRACE(op.group + " " + std::string(dtype_name(dt)));
      const double tol = dt == kFloat64 ? 1e-10 : 1e-5;
      std::vector<Tensor> ins;
      for (int i = 0; i < op.inputs; ++i) {
        ins.push_back(f.tensor("/" + op.group + "/input_" + std::to_string(i), dt).set_requires_grad(true));
      }
      Tensor out = op.fn(ins);
      out.backward(f.tensor("/" + op.group + "/grad_output", dt));
      auto expect_close = [&](const Tensor& got, const std::string& path) {
        const std::vector<double> g = values(got), w = f.f64(path);
        ASSERT_EQ(g.size(), w.size()) << path;
        double scale = 0;
        for (double v : w) scale = std::max(scale, std::abs(v));
        for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * scale) << path << " " << i;
      };
      expect_close(out, "/" + op.group + "/output");
      for (int i = 0; i < op.inputs; ++i) {
        expect_close(ins[static_cast<size_t>(i)].grad(), "/" + op.group + "/grad_input_" + std::to_string(i));
      }
    }
  }
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(MatmulErrors, Messages) {
  const Tensor m43 = ones({4, 3}), m45 = ones({4, 5});
  EXPECT_EQ(error_of([&] { matmul(m43, m45); }),
            "matmul: cannot multiply [4, 3] by [4, 5]: inner sizes 3 and 4 differ");
  EXPECT_EQ(error_of([&] { mm(m43, m45); }), "mm: cannot multiply [4, 3] by [4, 5]: inner sizes 3 and 4 differ");
  const std::string dtype_err = error_of([&] { mm(ones({2, 3}), ones({3, 2}, {.dtype = kFloat16})); });
  EXPECT_THAT(dtype_err, HasSubstr("mm: expected self and mat2 to have the same dtype, got f32 [2, 3] and f16 [3, 2]"));
  EXPECT_THAT(error_of([&] {
                matmul(ones({2, 3}, {.dtype = kBFloat16}), ones({3}, {.dtype = kFloat64}));
              }),
              HasSubstr("got bf16 [2, 3] and f64 [3]"));
  EXPECT_THAT(error_of([&] {
                mm(ones({2, 3, 4}), ones({4, 5}));
              }),
              HasSubstr("mm: expected 2-D operands, got [2, 3, 4]"));
  EXPECT_THAT(error_of([&] { bmm(ones({2, 3, 4}), ones({3, 4, 5})); }), HasSubstr("bmm: batch sizes 2 and 3"));
  EXPECT_THAT(error_of([&] {
                bmm(ones({2, 3, 4}), ones({2, 5, 5}));
              }),
              HasSubstr("bmm: cannot multiply [2, 3, 4] by [2, 5, 5]: inner sizes 4 and 5 differ"));
  EXPECT_THAT(error_of([&] { matmul(scalar_tensor(1.0), ones({3})); }),
              HasSubstr("matmul: both arguments need at least 1 dim"));
  EXPECT_THAT(error_of([&] {
                matmul(ones({2, 3, 4}), ones({3, 4, 5}));
              }),
              HasSubstr("matmul: shapes [2] and [3] cannot be broadcast"));
  EXPECT_THAT(error_of([&] { matmul(ones({3}), ones({4})); }), HasSubstr("inner sizes 3 and 4 differ"));
  EXPECT_THAT(error_of([&] {
                linear(ones({2, 6}), ones({4, 5}));
              }),
              HasSubstr("linear: input [2, 6] has 6 features in its last dim, but weight [4, 5] expects 5"));
  EXPECT_THAT(error_of([&] { linear(ones({2, 5}), ones({5})); }), HasSubstr("linear: expected a 2-D weight"));
  EXPECT_THAT(error_of([&] {
                linear(ones({2, 5}), ones({4, 5}), ones({3}));
              }),
              HasSubstr("linear: bias [3] does not broadcast to the product's shape [4]"));
  EXPECT_THAT(error_of([&] {
                addmm(ones({3, 3}), ones({2, 4}), ones({4, 3}));
              }),
              HasSubstr("addmm: bias [3, 3] does not broadcast to the product's shape [2, 3]"));
  EXPECT_THAT(error_of([&] {
                addmm(ones({3}, {.dtype = kFloat64}), ones({2, 4}), ones({4, 3}));
              }),
              HasSubstr("addmm: expected bias and the matrices to have the same dtype, got f64 and f32"));
  EXPECT_THAT(error_of([&] {
                mm(ones({2, 2}, {.dtype = kInt64}), ones({2, 2}, {.dtype = kInt64}));
              }),
              HasSubstr("mm: expected a floating self (f32, f64, f16, bf16), got i64"));
  EXPECT_THAT(error_of([&] {
                baddbmm(ones({1}), ones({2, 3, 4}), ones({1, 4, 5}));
              }),
              HasSubstr("baddbmm: batch sizes 2 and 1"));
  EXPECT_THAT(error_of([&] { mm(Tensor(), ones({2, 2})); }), HasSubstr("mm: self is an undefined tensor"));
}

}  // namespace
}  // namespace mantissa
