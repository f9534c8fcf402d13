// cat, stack, split, index_select, gather, one_hot: PyTorch golden values for cat, values against
// hand-built expectations, gradchecks (non-contiguous inputs included), and the error messages.
#include "ops/shape/shape.h"

#include <gtest/gtest.h>

#include "tests/ops/nn_testing.h"

namespace mantissa {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::gradgradcheck;
using testing::random_tensor;

TEST(Shape, CatGolden) {
  testing::GoldenFile file("ops.h5");
  const int64_t dim = file.attr_i64("/cat_dim1", "dim");
  auto op = [dim](const std::vector<Tensor>& in) { return cat(in, dim); };
  testing::check_golden("cat_dim1", 2, kFloat64, 0, 0, op);     // copies: exact
  testing::check_golden("cat_dim1", 2, kFloat32, 1e-7, 0, op);  // one f64 -> f32 rounding (6e-8)
}

TEST(Shape, CatValuesPromotionAndEmpty) {
  const Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = from_vector<double>({5, 6}, {2, 1});
  const Tensor c = cat({a, b, zeros({0})}, 1);  // a 1-D empty tensor is skipped, as in PyTorch
  EXPECT_EQ(c.dtype(), kFloat64);
  EXPECT_TRUE(all_close(c, from_vector<double>({1, 2, 5, 3, 4, 6}, {2, 3}), 0, 0));
  EXPECT_TRUE(all_close(cat({a, a}, -2), from_vector<float>({1, 2, 3, 4, 1, 2, 3, 4}, {4, 2}), 0, 0));
}

TEST(Shape, CatGradcheckAndDtypes) {
  const Tensor a = random_tensor({2, 3}, 41), b = random_tensor({3, 2}, 42), c = random_tensor({2, 1}, 43);
  // b enters transposed (non-contiguous).
  EXPECT_TRUE(gradcheck([](const auto& in) { return cat({in[0], in[1].t(), in[2]}, 1); }, {a, b, c}));
  // Mixed dtypes: each input gets its gradient in its own dtype.
  const Tensor f = random_tensor({1, 2}, 44, kFloat32).set_requires_grad(true);
  const Tensor d = random_tensor({2, 2}, 45, kFloat64).set_requires_grad(true);
  cat({f, d}, 0).backward(ones({3, 2}, {.dtype = kFloat64}));
  EXPECT_EQ(f.grad().dtype(), kFloat32);
  EXPECT_EQ(d.grad().dtype(), kFloat64);
}

TEST(Shape, CatErrorsNameTheTensorAndSizes) {
  const std::string sizes = testing::error_of([] { cat({zeros({2, 3}), zeros({2, 3}), zeros({4, 3})}, 1); });
  EXPECT_NE(sizes.find("cat: sizes must match except in dim 1, but tensor 2 has shape [4, 3] and tensor 0 has "
                       "shape [2, 3]"),
            std::string::npos)
      << sizes;
  const std::string ndim = testing::error_of([] { cat({zeros({2, 3}), zeros({6})}, 0); });
  EXPECT_NE(ndim.find("cat: tensor 1 has 1 dims [6] but tensor 0 has 2 dims [2, 3]"), std::string::npos) << ndim;
  EXPECT_NE(testing::error_of([] { cat({}, 0); }).find("non-empty list"), std::string::npos);
  EXPECT_NE(testing::error_of([] { cat({zeros({2})}, 1); }).find("cat: dim 1 is out of range"), std::string::npos);
}

TEST(Shape, Stack) {
  const Tensor a = from_vector<double>({1, 2, 3}), b = from_vector<double>({4, 5, 6});
  EXPECT_TRUE(all_close(stack({a, b}), from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}), 0, 0));
  EXPECT_TRUE(all_close(stack({a, b}, -1), from_vector<double>({1, 4, 2, 5, 3, 6}, {3, 2}), 0, 0));
  EXPECT_TRUE(gradcheck(
      [](const auto& in) {
        return stack({in[0], in[1].t()}, 1);
      },
      {random_tensor({2, 3}, 46), random_tensor({3, 2}, 47)}));
  const std::string msg = testing::error_of([] { stack({zeros({2}), zeros({2}), zeros({3})}); });
  EXPECT_NE(msg.find("stack: all tensors must have the same shape, but tensor 2 has shape [3]"), std::string::npos)
      << msg;
}

TEST(Shape, SplitReturnsViews) {
  const Tensor x = arange(10.0, {.dtype = kFloat64}).reshape({2, 5});
  const std::vector<Tensor> parts = split(x, 2, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{2, 1}));
  for (const Tensor& p : parts) EXPECT_TRUE(p.shares_storage(x));
  EXPECT_TRUE(all_close(parts[1], from_vector<double>({2, 3, 7, 8}, {2, 2}), 0, 0));
  const std::vector<Tensor> by_sizes = split(x, std::vector<int64_t>{1, 4}, -1);
  ASSERT_EQ(by_sizes.size(), 2u);
  EXPECT_EQ(by_sizes[1].shape(), (Shape{2, 4}));
  EXPECT_TRUE(by_sizes[1].shares_storage(x));
  EXPECT_TRUE(all_close(by_sizes[0], from_vector<double>({0, 5}, {2, 1}), 0, 0));
  // Gradients flow back through the views into the right places.
  EXPECT_TRUE(gradcheck(
      [](const auto& in) {
        const auto p = split(in[0], std::vector<int64_t>{2, 1, 2}, 1);
        return cat({p[2] * p[0], p[1]}, 1);
      },
      {random_tensor({3, 5}, 48)}));
}

// split's views share one node, whose backward writes every piece's gradient into one tensor; a piece no
// gradient reached contributes zeros; the ops after it differentiate twice.
TEST(Shape, SplitBackwardIsOneNode) {
  const Tensor x = arange(12.0, {.dtype = kFloat64}).reshape({3, 4}).set_requires_grad(true);
  const std::vector<Tensor> parts = split(x, std::vector<int64_t>{1, 2, 1}, 1);
  EXPECT_EQ(parts[0].grad_fn(), parts[2].grad_fn());
  EXPECT_EQ(parts[0].grad_fn()->name(), "SplitBackward");
  EXPECT_EQ(parts[2].output_nr(), 2u);
  sum(parts[0] * 2.0 + parts[2]).backward();
  EXPECT_TRUE(all_close(x.grad(), from_vector<double>({2, 0, 0, 1, 2, 0, 0, 1, 2, 0, 0, 1}, {3, 4}), 0, 0));
  EXPECT_TRUE(gradgradcheck(
      [](const auto& in) {
        const auto p = split(in[0], 2, 1);
        return p[0] * p[1] * p[0];
      },
      {random_tensor({3, 4}, 49)}));
}

TEST(Shape, SplitErrors) {
  const std::string sizes = testing::error_of([] { split(zeros({2, 5}), std::vector<int64_t>{2, 2}, 1); });
  EXPECT_NE(sizes.find("split: sizes [2, 2] add up to 4 but [2, 5] has size 5 in dim 1"), std::string::npos) << sizes;
  EXPECT_NE(testing::error_of([] { split(zeros({4}), 0); }).find("split_size must be positive"), std::string::npos);
}

TEST(Shape, IndexSelect) {
  const Tensor x = arange(12.0, {.dtype = kFloat64}).reshape({3, 4});
  const Tensor idx = from_vector<int64_t>({3, 0, 3});
  EXPECT_TRUE(all_close(index_select(x, 1, idx), from_vector<double>({3, 0, 3, 7, 4, 7, 11, 8, 11}, {3, 3}), 0, 0));
  EXPECT_TRUE(
      all_close(index_select(x, 0, from_vector<int32_t>({2})), from_vector<double>({8, 9, 10, 11}, {1, 4}), 0, 0));
  // Integer tensors can be selected too.
  EXPECT_TRUE(all_close(index_select(from_vector<int64_t>({7, 8, 9}), 0, from_vector<int64_t>({2, 2})),
                        from_vector<int64_t>({9, 9}), 0, 0));
  // Repeated indices add in the backward; the input enters transposed.
  for (int64_t dim : {0, 1}) {
    EXPECT_TRUE(gradcheck([&](const auto& in) { return index_select(in[0].t(), dim, idx.narrow(0, 0, 3 - dim)); },
                          {random_tensor({4, 4}, 49)}));
  }
  const std::string msg = testing::error_of([&] { index_select(x, 0, idx); });
  EXPECT_NE(msg.find("index_select: index 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of range for a dim of size 3"), std::string::npos) << msg;
}

TEST(Shape, Gather) {
  const Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor idx = from_vector<int64_t>({2, 2, 0, 1}, {2, 2});
  EXPECT_TRUE(all_close(gather(x, 1, idx), from_vector<double>({3, 3, 4, 5}, {2, 2}), 0, 0));
  EXPECT_TRUE(
      all_close(gather(x, 0, from_vector<int64_t>({1, 0, 1}, {1, 3})), from_vector<double>({4, 2, 6}, {1, 3}), 0, 0));
  // Gradcheck with repeated indices, over both dims, with a non-contiguous input.
  EXPECT_TRUE(gradcheck([&](const auto& in) { return gather(in[0].t(), 1, idx); }, {random_tensor({3, 2}, 50)}));
  EXPECT_TRUE(gradcheck(
      [&](const auto& in) {
        return gather(in[0], 0, from_vector<int64_t>({1, 1, 0}, {1, 3}));
      },
      {random_tensor({2, 3}, 51)}));
  const std::string range = testing::error_of([&] { gather(x, 1, from_vector<int64_t>({3}, {1, 1})); });
  EXPECT_NE(range.find("gather: index 3"), std::string::npos) << range;
  const std::string dims = testing::error_of([&] { gather(x, 1, from_vector<int64_t>({0})); });
  EXPECT_NE(dims.find("must have as many dims as the input [2, 3]"), std::string::npos) << dims;
}

TEST(Shape, OneHot) {
  const Tensor oh = one_hot(from_vector<int64_t>({0, 2, 1, 2}, {2, 2}), 3);
  EXPECT_EQ(oh.dtype(), kInt64);
  EXPECT_TRUE(all_close(oh, from_vector<int64_t>({1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1}, {2, 2, 3}), 0, 0));
  EXPECT_EQ(one_hot(from_vector<int64_t>({4, 1}), -1).shape(), (Shape{2, 5}));  // inferred: max + 1
  const std::string msg = testing::error_of([] { one_hot(from_vector<int64_t>({1, 3}), 3); });
  EXPECT_NE(msg.find("one_hot: index 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_classes 3"), std::string::npos) << msg;
}

}  // namespace
}  // namespace mantissa
