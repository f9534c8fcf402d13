// Views share storage: view/reshape, transpose/permute, slice/narrow/select, expand, squeeze/unsqueeze
// and flatten give the right shape, strides, offset and values, writes show through, and gradients
// flow back through them to the leaf.
#include <gtest/gtest.h>

#include <vector>

#include "framework/autograd.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.to(DType::kF64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// The element of `t` at a multi-index, read through its strides and offset.
double at(const Tensor& t, const std::vector<int64_t>& index) {
  int64_t off = t.offset();
  for (size_t d = 0; d < index.size(); ++d) off += index[d] * t.strides()[d];
  return make_view(t, {}, {}, off).item();
}

// a[i][j][k] = 12 i + 4 j + k, shape [2, 3, 4].
Tensor base_tensor() { return arange(24, {.dtype = DType::kF32}).view({2, 3, 4}); }

TEST(TensorView, ViewAndReshape) {
  const Tensor flat = arange(24, {.dtype = DType::kF32});
  const Tensor a = flat.view({2, 3, 4});
  EXPECT_EQ(a.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(a.shares_storage(flat));
  EXPECT_EQ(at(a, {1, 2, 3}), 23.0);
  EXPECT_EQ(a.view({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(a.view({4, -1}).strides(), (Shape{6, 1}));
  a.view({6, 4}).data<float>()[5] = -1.0f;  // a write through one view shows in the others
  EXPECT_EQ(flat.data<float>()[5], -1.0f);
  EXPECT_EQ(at(a, {0, 1, 1}), -1.0);
  // A view of a permuted tensor splits a dim that is contiguous on its own.
  const Tensor p = a.permute({2, 0, 1});  // [4, 2, 3], strides [1, 12, 4]
  const Tensor pv = p.view({4, 2, 3, 1});
  EXPECT_TRUE(pv.shares_storage(a));
  EXPECT_EQ(at(pv, {3, 1, 2, 0}), at(a, {1, 2, 3}));
  // reshape views when it can and copies when it must.
  EXPECT_TRUE(a.reshape({24}).shares_storage(a));
  const Tensor r = a.transpose(1, 2).reshape({8, 3});
  EXPECT_FALSE(r.shares_storage(a));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(at(r, {1, 2}), at(a, {0, 2, 1}));  // row 1 = (i 0, k 1), column = j
}

TEST(TensorView, TransposeAndPermute) {
  const Tensor a = base_tensor();
  const Tensor t = a.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(t.offset(), 0);
  EXPECT_TRUE(t.shares_storage(a));
  EXPECT_FALSE(t.is_contiguous());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) ASSERT_EQ(at(t, {k, j, i}), at(a, {i, j, k}));
  const Tensor p = a.permute({2, 0, -2});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(at(p, {3, 1, 0}), at(a, {1, 0, 3}));
  EXPECT_EQ(a.transpose(-1, -2).shape(), (Shape{2, 4, 3}));
  const Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(values(m.t()), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(values(m.t().t()), values(m));
}

TEST(TensorView, SliceNarrowSelect) {
  const Tensor a = base_tensor();
  const Tensor s = a.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(s.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(s.offset(), 4);
  EXPECT_TRUE(s.shares_storage(a));
  EXPECT_EQ(at(s, {1, 0, 2}), at(a, {1, 1, 2}));
  const Tensor stepped = a.slice(2, 1, 4, 2);  // k = 1, 3
  EXPECT_EQ(stepped.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(stepped.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(stepped.offset(), 1);
  EXPECT_EQ(at(stepped, {0, 2, 1}), at(a, {0, 2, 3}));
  EXPECT_EQ(a.slice(2, -2, 100).shape(), (Shape{2, 3, 2}));  // negative start, end clamped
  EXPECT_EQ(a.slice(2, 3, 1).shape(), (Shape{2, 3, 0}));     // an empty range
  const Tensor n = a.narrow(2, 1, 2);
  EXPECT_EQ(n.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(n.offset(), 1);
  EXPECT_EQ(values(n.select(0, 0).select(0, 0)), (std::vector<double>{1, 2}));
  const Tensor sel = a.select(0, 1);
  EXPECT_EQ(sel.shape(), (Shape{3, 4}));
  EXPECT_EQ(sel.strides(), (Shape{4, 1}));
  EXPECT_EQ(sel.offset(), 12);
  const Tensor last = a.select(-1, -1);  // k = 3
  EXPECT_EQ(last.shape(), (Shape{2, 3}));
  EXPECT_EQ(last.offset(), 3);
  EXPECT_EQ(values(last), (std::vector<double>{3, 7, 11, 15, 19, 23}));
  // Writes into a slice land in the base.
  fill_(a.slice(1, 0, 1), 0.0);
  EXPECT_EQ(at(a, {1, 0, 3}), 0.0);
  EXPECT_EQ(at(a, {1, 1, 0}), 16.0);
}

TEST(TensorView, Expand) {
  const Tensor col = from_vector<float>({1, 2, 3}, {3, 1});
  const Tensor e = col.expand({3, 4});
  EXPECT_EQ(e.shape(), (Shape{3, 4}));
  EXPECT_EQ(e.strides(), (Shape{1, 0}));
  EXPECT_TRUE(e.shares_storage(col));
  EXPECT_EQ(values(e), (std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}));
  const Tensor lead = col.expand({2, -1, 2});
  EXPECT_EQ(lead.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(lead.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(at(lead, {1, 2, 1}), 3.0);
  EXPECT_TRUE(col.expand({3, 1}).is_same(col));  // nothing to expand
  EXPECT_TRUE(e.contiguous().is_contiguous());
  EXPECT_FALSE(e.contiguous().shares_storage(col));
}

TEST(TensorView, SqueezeUnsqueezeFlatten) {
  const Tensor x = arange(6, {.dtype = DType::kF64}).view({1, 3, 1, 2});
  EXPECT_EQ(x.squeeze().shape(), (Shape{3, 2}));
  EXPECT_EQ(x.squeeze(2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{1, 3, 1, 2}));  // size 3 stays
  EXPECT_EQ(x.squeeze(-4).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 1, 3, 1, 2}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{1, 3, 1, 2, 1}));
  EXPECT_TRUE(x.squeeze().shares_storage(x));
  EXPECT_TRUE(x.unsqueeze(2).shares_storage(x));
  EXPECT_EQ(values(x.squeeze()), values(x));
  const Tensor a = base_tensor();
  EXPECT_EQ(a.flatten().shape(), (Shape{24}));
  EXPECT_EQ(a.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(a.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(a.flatten(-2, -1).strides(), (Shape{12, 1}));
  EXPECT_TRUE(a.flatten().shares_storage(a));
  const Tensor tf = a.transpose(0, 1).flatten();  // needs a copy
  EXPECT_FALSE(tf.shares_storage(a));
  EXPECT_EQ(values(tf)[4], at(a, {1, 0, 0}));  // (j 0, i 1, k 0)
  EXPECT_EQ(scalar_tensor(5.0).flatten().shape(), (Shape{1}));
}

// ---- autograd through views: the leaf gets the gradient of the elements the view used ----

Tensor leaf_2x3() { return from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, {.requires_grad = true}); }

TEST(TensorViewGrad, TransposeAndPermute) {
  const Tensor x = leaf_2x3();
  const Tensor w = from_vector<float>({10, 20, 30, 40, 50, 60}, {3, 2});
  sum(x.t() * w).backward();
  EXPECT_EQ(values(x.grad()), values(w.t()));
  EXPECT_EQ(x.grad().shape(), (Shape{2, 3}));
  EXPECT_EQ(x.grad().dtype(), DType::kF32);
}

TEST(TensorViewGrad, SliceNarrowSelect) {
  const Tensor x = leaf_2x3();
  sum(x.slice(1, 1, 3)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 1, 0, 1, 1}));
  const Tensor y = leaf_2x3();
  sum(y.select(0, 1) * 2.0).backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{0, 0, 0, 2, 2, 2}));
  const Tensor z = from_vector<float>({1, 2, 3, 4, 5, 6}, {6}, {.requires_grad = true});
  sum(z.slice(0, 0, 6, 2) * z.narrow(0, 3, 3)).backward();  // z0 z3 + z2 z4 + z4 z5
  EXPECT_EQ(values(z.grad()), (std::vector<double>{4, 0, 5, 1, 3 + 6, 5}));
}

TEST(TensorViewGrad, ExpandSumsOverTheBroadcastDims) {
  const Tensor x = leaf_2x3();
  sum(x.unsqueeze(0).expand({4, 2, 3})).backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>(6, 4.0));
  const Tensor c = from_vector<float>({1, 2}, {2, 1}, {.requires_grad = true});
  const Tensor w = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  sum(c.expand({2, 3}) * w).backward();
  EXPECT_EQ(values(c.grad()), (std::vector<double>{6, 15}));
  EXPECT_EQ(c.grad().shape(), (Shape{2, 1}));
}

TEST(TensorViewGrad, ChainOfViewsAndCasts) {
  const Tensor x = leaf_2x3();
  // x.view(3, 2).permute(1, 0) is [[1, 3, 5], [2, 4, 6]]; narrow keeps columns 0..1, i.e. x0 x2 x1 x3.
  const Tensor y = x.view({3, 2}).permute({1, 0}).narrow(1, 0, 2);
  const Tensor c = from_vector<float>({1, 10, 100, 1000}, {2, 2});
  sum(y * c).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 100, 10, 1000, 0, 0}));
  // Through a cast to f16 and back, squeeze/unsqueeze and flatten: an f32 leaf gets an f32 grad.
  const Tensor z = leaf_2x3();
  sum(z.to(DType::kF16).unsqueeze(1).flatten().to(DType::kF32).squeeze() * 3.0).backward();
  EXPECT_EQ(z.grad().dtype(), DType::kF32);
  EXPECT_EQ(values(z.grad()), std::vector<double>(6, 3.0));
  // clone() and contiguous() of a transposed view pass the gradient straight through.
  const Tensor u = leaf_2x3();
  sum(u.t().contiguous().clone() * u.t()).backward();  // sum of u^2
  EXPECT_EQ(values(u.grad()), (std::vector<double>{2, 4, 6, 8, 10, 12}));
}

}  // namespace
}  // namespace mantissa
