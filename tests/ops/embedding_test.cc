// embedding: PyTorch golden values, repeated indices accumulating in the backward, i32 indices,
// gradcheck, 16-bit weights, and the out-of-range error.
#include "ops/embedding/embedding.h"

#include <gtest/gtest.h>

#include "tests/ops/nn_testing.h"

namespace mantissa {
namespace {

using testing::all_close;
using testing::random_tensor;

TEST(Embedding, Golden) {
  testing::GoldenFile file("ops.h5");
  const Tensor indices = from_vector<int64_t>(file.attr_i64_vector("/embedding", "indices"), {3, 5});
  auto op = [&](const std::vector<Tensor>& in) { return embedding(in[0], indices); };
  // A copy and a sum of rows: f64 is exact up to the order of the gradient sums.
  testing::check_golden("embedding", 1, kFloat64, 1e-12, 1e-15, op);
  // f32: the values are the rounded f64 weights (6e-8 relative), gradients sums of up to 3 rounded terms.
  testing::check_golden("embedding", 1, kFloat32, 2e-7, 1e-7, op);
}

TEST(Embedding, ShapeValuesAndRepeatedIndicesAccumulate) {
  const Tensor w = random_tensor({5, 3}, 21).set_requires_grad(true);
  const Tensor idx = from_vector<int64_t>({4, 1, 4, 4, 0, 1}, {2, 3});
  const Tensor out = embedding(w, idx);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 3}));
  EXPECT_TRUE(all_close(out.select(0, 1).select(0, 0), w.detach().select(0, 4), 0, 0));
  out.backward(ones({2, 3, 3}, {.dtype = kFloat64}));
  // Row r of the gradient counts how often r was looked up: 0 once, 1 twice, 4 three times.
  const std::vector<double> g = testing::values(w.grad());
  const std::vector<double> counts = {1, 2, 0, 0, 3};
  for (int64_t r = 0; r < 5; ++r) {
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(g[static_cast<size_t>(r * 3 + c)], counts[static_cast<size_t>(r)]);
  }
}

TEST(Embedding, Int32IndicesAndNonContiguousWeight) {
  const Tensor w = random_tensor({3, 6}, 22);
  const Tensor idx32 = from_vector<int32_t>({2, 0, 2});
  const Tensor idx64 = from_vector<int64_t>({2, 0, 2});
  EXPECT_TRUE(all_close(embedding(w, idx32), embedding(w, idx64), 0, 0));
  const Tensor wt = random_tensor({6, 3}, 23).t();  // a [3, 6] view with strides (1, 3)
  EXPECT_TRUE(all_close(embedding(wt, idx64), embedding(wt.contiguous(), idx64), 0, 0));
}

TEST(Embedding, Gradcheck) {
  const Tensor idx = from_vector<int64_t>({1, 3, 1, 0}, {2, 2});
  EXPECT_TRUE(testing::gradcheck([&](const auto& in) { return embedding(in[0], idx); }, {random_tensor({4, 3}, 24)}));
  EXPECT_TRUE(
      testing::gradcheck([&](const auto& in) { return embedding(in[0].t(), idx); }, {random_tensor({3, 4}, 25)}));
}

TEST(Embedding, SixteenBitGradientRoundsOnce) {
  // 300 lookups of row 0 with gradient 0.1 each: summed in fp32 then rounded once, unlike a bf16
  // running sum (which stalls once 0.1 is below half an ulp of the total).
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor w = zeros({2, 4}, {.dtype = dt}).set_requires_grad(true);
    const Tensor idx = zeros({300}, {.dtype = kInt64});
    embedding(w, idx).backward(full({300, 4}, 0.1, {.dtype = dt}));
    EXPECT_EQ(w.grad().dtype(), dt);
    const float expected = static_cast<float>(
        300 * static_cast<double>(static_cast<float>(dt == kBFloat16 ? float(BFloat16(0.1f)) : float(Half(0.1f)))));
    const Tensor want = full({4}, expected, {.dtype = dt});
    EXPECT_TRUE(all_close(w.grad().select(0, 0), want, 0, 0));
  }
}

TEST(Embedding, Errors) {
  const Tensor w = zeros({10, 4});
  const std::string range = testing::error_of([&] { embedding(w, from_vector<int64_t>({3, 10})); });
  EXPECT_NE(range.find("embedding: index 10"), std::string::npos) << range;
  EXPECT_NE(range.find("num_embeddings 10"), std::string::npos) << range;
  const std::string neg = testing::error_of([&] { embedding(w, from_vector<int64_t>({-1})); });
  EXPECT_NE(neg.find("index -1"), std::string::npos) << neg;
  const std::string dtype = testing::error_of([&] { embedding(w, zeros({2})); });
  EXPECT_NE(dtype.find("expected an index of dtype i64 or i32, got f32"), std::string::npos) << dtype;
  const std::string shape = testing::error_of([&] { embedding(zeros({10}), from_vector<int64_t>({1})); });
  EXPECT_NE(shape.find("[num_embeddings, embedding_dim], got [10]"), std::string::npos) << shape;
}

}  // namespace
}  // namespace mantissa
