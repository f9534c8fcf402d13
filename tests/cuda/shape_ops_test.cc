// CUDA cat / stack / split, index_select, gather, scatter_add, index_put, one_hot, nll_loss, var,
// logsumexp, norm, cumsum and GPT.generate against the CPU on random inputs (incl. non-contiguous views),
// forward and backward. Device outputs are allocated from a cache first filled with 0xFF, so an element a
// kernel fails to write shows up.
// Skipped without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "framework/generator.h"
#include "models/gpt.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::on_cuda;
using testing::random_tensor;
using testing::within_rel;
using testing::within_ulps;

// Leaf copies of x on the CPU and the GPU, both requiring grad.
std::pair<Tensor, Tensor> leaves(const Tensor& x) {
  Tensor c = x.contiguous(), d = on_cuda(x);
  c.set_requires_grad(true);
  d.set_requires_grad(true);
  return {c, d};
}

Tensor random_index(const Shape& shape, int64_t limit, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> v(static_cast<size_t>(shape_numel(shape)));
  for (int64_t& i : v) i = static_cast<int64_t>(gen.next_u32() % static_cast<uint32_t>(limit));
  return from_vector<int64_t>(v, shape);
}

// Scatter-add style gradients add repeated rows with f32 (f64) atomics in any order, then round once:
// f32 within a few ulps of the sum, f64 far below 1e-12, 16-bit within one rounding step of the dtype.
double atomic_sum_tol(DType dt) {
  switch (dt) {
    case DType::kF64: return 1e-12;
    case DType::kF32: return 1e-5;
    case DType::kF16: return 1e-3;
    default: return 8e-3;
  }
}

const DType kFloats[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

TEST(CudaShapeOps, CatStackSplitForwardAndBackward) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kFloats) {
    auto [a, ad] = leaves(random_tensor({4, 3, 5}, dt, 1));
    auto [b, bd] = leaves(random_tensor({5, 3, 4}, dt, 2));  // transposed below: non-contiguous
    auto [c, cd] = leaves(random_tensor({4, 1, 5}, dt, 3));
    const Tensor y = cat({a, b.transpose(0, 2), c}, 1);
    const Tensor yd = cat({ad, bd.transpose(0, 2), cd}, 1);
    EXPECT_EQ(yd.device(), cuda(0));
    EXPECT_TRUE(within_ulps(y, yd, 0)) << dtype_name(dt);  // copies: exact
    const Tensor g = random_tensor(y.shape(), dt, 4);
    y.backward(g);
    yd.backward(on_cuda(g));
    EXPECT_TRUE(within_ulps(a.grad(), ad.grad(), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(b.grad(), bd.grad(), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(c.grad(), cd.grad(), 0)) << dtype_name(dt);

    auto [s0, s0d] = leaves(random_tensor({3, 6}, dt, 5));
    auto [s1, s1d] = leaves(random_tensor({3, 6}, dt, 6));
    const Tensor st = stack({s0, s1.t().t()}, 1), std_ = stack({s0d, s1d.t().t()}, 1);
    EXPECT_TRUE(within_ulps(st, std_, 0)) << dtype_name(dt);
    const Tensor gs = random_tensor(st.shape(), dt, 7);
    st.backward(gs);
    std_.backward(on_cuda(gs));
    EXPECT_TRUE(within_ulps(s0.grad(), s0d.grad(), 0)) << dtype_name(dt);
    EXPECT_TRUE(within_ulps(s1.grad(), s1d.grad(), 0)) << dtype_name(dt);

    // split's pieces are views; their gradients meet in the input.
    auto [x, xd] = leaves(random_tensor({7, 4}, dt, 8));
    const std::vector<Tensor> parts = split(x, 3, 0), parts_d = split(xd, 3, 0);
    ASSERT_EQ(parts.size(), parts_d.size());
    const Tensor loss = sum(mul(parts[0], 2.0)) + sum(parts[2]);
    const Tensor loss_d = sum(mul(parts_d[0], 2.0)) + sum(parts_d[2]);
    loss.backward();
    loss_d.backward();
    EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0)) << dtype_name(dt);  // 2, 0 or 1 per element: exact
  }
  // Integer tensors concatenate too (no gradient).
  const Tensor i0 = random_index({2, 3}, 100, 9), i1 = random_index({2, 2}, 100, 10);
  EXPECT_TRUE(within_ulps(cat({i0, i1}, 1), cat({on_cuda(i0), on_cuda(i1)}, 1), 0));
}

TEST(CudaShapeOps, IndexSelectForwardAndBackward) {
  MT_SKIP_WITHOUT_CUDA();
  const Tensor index = random_index({9}, 6, 11);  // repeats: the backward adds rows
  for (DType dt : kFloats) {
    for (int64_t dim : {0, 1, 2}) {
      auto [x, xd] = leaves(random_tensor({6, 6, 6}, dt, 12));
      const Tensor y = index_select(x.transpose(0, 1), dim, index);
      const Tensor yd = index_select(xd.transpose(0, 1), dim, on_cuda(index));  // a device index
      EXPECT_TRUE(within_ulps(y, yd, 0)) << dtype_name(dt) << " dim " << dim;   // a gather: exact
      const Tensor yc = index_select(xd, dim, index);                           // a host index
      EXPECT_TRUE(within_ulps(index_select(x, dim, index), yc, 0));
      const Tensor g = random_tensor(y.shape(), dt, 13);
      y.backward(g);
      yd.backward(on_cuda(g));
      const double tol = atomic_sum_tol(dt);
      EXPECT_TRUE(within_rel(x.grad(), xd.grad(), tol, tol)) << dtype_name(dt) << " dim " << dim;
    }
  }
  // Integer tensors are selected too (exact).
  const Tensor ints = random_index({5, 6}, 1000, 14);
  EXPECT_TRUE(within_ulps(index_select(ints, 1, index), index_select(on_cuda(ints), 1, on_cuda(index)), 0));
}

TEST(CudaShapeOps, GatherAndScatterAddForwardAndBackward) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kFloats) {
    for (int64_t dim : {0, 1, 2}) {
      auto [x, xd] = leaves(random_tensor({5, 6, 7}, dt, 21));
      const Tensor xv = x.transpose(0, 2).transpose(0, 2), xvd = xd.transpose(0, 2).transpose(0, 2);
      auto [xs, xsd] = leaves(random_tensor({7, 6, 5}, dt, 22));
      const Tensor index = random_index({4, 5, 3}, Shape{5, 6, 7}[static_cast<size_t>(dim)], 23 + dim);
      const Tensor y = gather(xs.transpose(0, 2), dim, index);  // strided input
      const Tensor yd = gather(xsd.transpose(0, 2), dim, on_cuda(index));
      EXPECT_TRUE(within_ulps(y, yd, 0)) << dtype_name(dt) << " dim " << dim;
      const Tensor g = random_tensor(y.shape(), dt, 24);
      y.backward(g);
      yd.backward(on_cuda(g));
      const double tol = atomic_sum_tol(dt);
      EXPECT_TRUE(within_rel(xs.grad(), xsd.grad(), tol, tol)) << dtype_name(dt) << " dim " << dim;

      // scatter_add: out = x + scatter(src); x's gradient passes through, src's is gathered back.
      auto [src, srcd] = leaves(random_tensor(index.shape(), dt, 25));
      const Tensor s = scatter_add(xv, dim, index, src), sd = scatter_add(xvd, dim, on_cuda(index), srcd);
      EXPECT_TRUE(within_rel(s, sd, tol, tol)) << dtype_name(dt) << " dim " << dim;
      const Tensor gs = random_tensor(s.shape(), dt, 26);
      s.backward(gs);
      sd.backward(on_cuda(gs));
      EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0)) << dtype_name(dt);
      EXPECT_TRUE(within_ulps(src.grad(), srcd.grad(), 0)) << dtype_name(dt);
    }
  }
  // Integer gather, and an out-of-range device index: NaN for floats (the device cannot throw).
  const Tensor ints = random_index({4, 6}, 1000, 27), idx = random_index({4, 6}, 6, 28);
  EXPECT_TRUE(within_ulps(gather(ints, 1, idx), gather(on_cuda(ints), 1, on_cuda(idx)), 0));
  const Tensor bad = from_vector<int64_t>({0, 9}, {2});
  const std::vector<double> got = testing::host_values(gather(on_cuda(ones({3})), 0, on_cuda(bad)));
  EXPECT_EQ(got[0], 1.0);
  EXPECT_TRUE(std::isnan(got[1]));
}

TEST(CudaShapeOps, OneHot) {
  MT_SKIP_WITHOUT_CUDA();
  const Tensor idx = random_index({3, 5}, 7, 31);
  EXPECT_TRUE(within_ulps(one_hot(idx, 7), one_hot(on_cuda(idx), 7), 0));
  EXPECT_TRUE(within_ulps(one_hot(idx, -1), one_hot(on_cuda(idx), -1), 0));  // classes inferred on the host
  EXPECT_EQ(one_hot(on_cuda(idx), 9).device(), cuda(0));
}

TEST(CudaShapeOps, IndexPutReplaceAndAccumulate) {
  MT_SKIP_WITHOUT_CUDA();
  const Tensor unique = from_vector<int64_t>({4, 0, 2}, {3});         // replace: no repeats (order-free)
  const Tensor repeats = from_vector<int64_t>({1, 3, 1, 1}, {2, 2});  // accumulate: repeats add
  for (DType dt : kFloats) {
    for (IndexPutMode mode : {IndexPutMode::kReplace, IndexPutMode::kAccumulate}) {
      const Tensor& index = mode == IndexPutMode::kReplace ? unique : repeats;
      Shape vshape = index.shape();
      vshape.push_back(3);
      auto [x, xd] = leaves(random_tensor({6, 3}, dt, 71));
      auto [v, vd] = leaves(random_tensor(vshape, dt, 72));
      const Tensor y = index_put(x, index, v, mode), yd = index_put(xd, on_cuda(index), vd, mode);
      // Replace copies (exact); accumulate adds up to 3 rows in f32 atomics, then rounds once.
      const double tol = mode == IndexPutMode::kReplace ? 0.0 : atomic_sum_tol(dt);
      EXPECT_TRUE(within_rel(y, yd, tol, tol)) << dtype_name(dt);
      const Tensor g = random_tensor(y.shape(), dt, 73);
      y.backward(g);
      yd.backward(on_cuda(g));
      EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0)) << dtype_name(dt);  // passes through or zeroed rows
      EXPECT_TRUE(within_rel(v.grad(), vd.grad(), atomic_sum_tol(dt), atomic_sum_tol(dt))) << dtype_name(dt);
    }
  }
}

TEST(CudaShapeOps, NllLossAllReductionsWithIgnoreIndex) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kFloats) {
    for (Reduction r : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
      // [N, C] and [N, C, d1] inputs; every third target ignored.
      for (const Shape& shape : {Shape{9, 5}, Shape{3, 5, 4}}) {
        Shape tshape = shape;
        tshape.erase(tshape.begin() + 1);
        std::vector<int64_t> tv;
        const Tensor t0 = random_index(tshape, 5, 41);
        for (int64_t i = 0; i < t0.numel(); ++i) tv.push_back(i % 3 == 0 ? -100 : t0.data<int64_t>()[i]);
        const Tensor target = from_vector<int64_t>(tv, tshape);
        auto [x, xd] = leaves(random_tensor(shape, dt, 42, -4.0, 0.0));
        const CrossEntropyOptions o{.reduction = r};
        const Tensor y = nll_loss(x, target, o), yd = nll_loss(xd, on_cuda(target), o);
        // kNone: a negation, exact. kMean / kSum: sums in f64 on both sides in different orders, then one
        // rounding to the dtype: at most one ulp apart.
        EXPECT_TRUE(within_ulps(y, yd, r == Reduction::kNone ? 0 : 1)) << dtype_name(dt);
        const Tensor g = r == Reduction::kNone ? random_tensor(y.shape(), dt, 43) : full({}, 0.75, {.dtype = dt});
        y.backward(g);
        yd.backward(on_cuda(g));
        // The same scale (the count is an exact integer on both sides), negated and rounded once: exact.
        EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0)) << dtype_name(dt);
      }
    }
  }
  // All targets ignored: mean is 0/0 = NaN on both backends.
  const Tensor t = full({2}, -100, {.dtype = DType::kI64});
  const Tensor x = random_tensor({2, 3}, DType::kF32, 44);
  EXPECT_TRUE(within_ulps(nll_loss(x, t), nll_loss(on_cuda(x), on_cuda(t)), 0));
}

TEST(CudaShapeOps, VarForwardAndBackward) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kFloats) {
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, 2}}) {
      auto [x, xd] = leaves(random_tensor({6, 33, 5}, dt, 51));
      const VarOptions o{.correction = 1, .keepdim = KeepDim::kNo};
      const Tensor y = dims.empty() ? var(x, o) : var(x, dims, o);
      const Tensor yd = dims.empty() ? var(xd.transpose(0, 1).transpose(0, 1), o) : var(xd, dims, o);
      // Sums of squares in f32 (f64) in another order: f32 within 1e-5 relative, f64 1e-12, 16-bit
      // within one rounding of the dtype.
      const double tol = dt == DType::kF64 ? 1e-12 : dt == DType::kF32 ? 1e-5 : dt == DType::kF16 ? 1e-3 : 8e-3;
      EXPECT_TRUE(within_rel(y, yd, tol, tol)) << dtype_name(dt);
      const Tensor g = random_tensor(y.shape(), dt, 52);
      y.backward(g);
      yd.backward(on_cuda(g));
      EXPECT_TRUE(within_rel(x.grad(), xd.grad(), tol, tol)) << dtype_name(dt);  // from the mean, as above
    }
  }
  // One element with correction 1: NaN on both.
  const Tensor one = random_tensor({1}, DType::kF32, 53);
  EXPECT_TRUE(within_ulps(var(one), var(on_cuda(one)), 0));
}

TEST(CudaShapeOps, LogsumexpAndNormForwardAndBackward) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kFloats) {
    // exp / log / pow differ by the two math libraries' few ulps and the sums by order: f32 1e-5
    // relative, f64 1e-12, 16-bit within one rounding of the dtype (both round an f32 value once).
    const double tol = dt == DType::kF64 ? 1e-12 : dt == DType::kF32 ? 1e-5 : dt == DType::kF16 ? 1e-3 : 8e-3;
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, 2}}) {
      for (KeepDim keep : {KeepDim::kNo, KeepDim::kYes}) {
        auto [x, xd] = leaves(random_tensor({4, 17, 3}, dt, 61));
        const Tensor y = logsumexp(x.transpose(0, 2).transpose(0, 2), dims, keep);
        const Tensor yd = logsumexp(xd.transpose(0, 2).transpose(0, 2), dims, keep);
        EXPECT_TRUE(within_rel(y, yd, tol, tol)) << dtype_name(dt);
        const Tensor g = random_tensor(y.shape(), dt, 62);
        y.backward(g);
        yd.backward(on_cuda(g));
        EXPECT_TRUE(within_rel(x.grad(), xd.grad(), tol, tol)) << dtype_name(dt);
      }
      for (double p : {1.0, 2.0, 3.0, static_cast<double>(INFINITY)}) {
        auto [x, xd] = leaves(random_tensor({4, 17, 3}, dt, 63));
        const NormOptions o{.p = p, .dims = dims};
        const Tensor y = norm(x, o), yd = norm(xd, o);
        EXPECT_TRUE(within_rel(y, yd, tol, tol)) << dtype_name(dt) << " p " << p;
        const Tensor g = random_tensor(y.shape(), dt, 64);
        y.backward(g);
        yd.backward(on_cuda(g));
        EXPECT_TRUE(within_rel(x.grad(), xd.grad(), tol, tol)) << dtype_name(dt) << " p " << p;
      }
    }
  }
  // A row of -inf gives -inf; a zero row's 2-norm gradient is 0 (not NaN) on both.
  const Tensor ninf = full({2, 3}, -INFINITY);
  EXPECT_TRUE(within_ulps(logsumexp(ninf, {1}), logsumexp(on_cuda(ninf), {1}), 0));
  auto [z, zd] = leaves(zeros({2, 3}));
  norm(z, {.dims = {1}}).backward(ones({2}));
  norm(zd, {.dims = {1}}).backward(on_cuda(ones({2})));
  EXPECT_TRUE(within_ulps(z.grad(), zd.grad(), 0));
}

TEST(CudaShapeOps, CumsumForwardAndBackward) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : kFloats) {
    for (int64_t dim : {0, 1, -1}) {
      auto [x, xd] = leaves(random_tensor({5, 33, 4}, dt, 81));
      const Tensor y = cumsum(x.transpose(0, 2), dim), yd = cumsum(xd.transpose(0, 2), dim);
      // The same additions in the same order in the same compute type, each rounded once: exact.
      EXPECT_TRUE(within_ulps(y, yd, 0)) << dtype_name(dt) << " dim " << dim;
      const Tensor g = random_tensor(y.shape(), dt, 82);
      y.backward(g);
      yd.backward(on_cuda(g));
      EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0)) << dtype_name(dt) << " dim " << dim;  // reverse scan
    }
  }
}

TEST(CudaShapeOps, GptGeneratesOnTheGpu) {
  MT_SKIP_WITHOUT_CUDA();
  Generator init(3);
  GPT model(GPTConfig{.vocab_size = 11, .n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 8},
            {.generator = &init});
  model.to(cuda(0));
  const Tensor prompt = from_vector<int64_t>({1, 2, 3}, {3});
  Generator gen(4);
  const Tensor out = model.generate(prompt, 10, {.temperature = 0.8, .top_k = 5, .generator = &gen});
  ASSERT_EQ(out.shape(), (Shape{13}));
  EXPECT_TRUE(out.device().is_cpu());  // returned where the prompt was
  const int64_t* p = out.data<int64_t>();
  EXPECT_EQ(p[0], 1);
  EXPECT_EQ(p[2], 3);
  for (int64_t i = 0; i < 13; ++i) EXPECT_TRUE(p[i] >= 0 && p[i] < 11) << i;
  const Tensor out_d = model.generate(on_cuda(prompt), 2, {.temperature = 0.0});
  EXPECT_EQ(out_d.device(), cuda(0));
}

}  // namespace
}  // namespace mantissa
