// CNN model: the 1600-feature flatten, parameter names, train/eval batch norm, training a tiny batch.
#include "models/cnn.h"

#include <gtest/gtest.h>

#include <cmath>

#include "amp/autocast.h"
#include "framework/random.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "tests/models/fit_support.h"

namespace mantissa {
namespace {

TEST(CnnModel, ShapesAndParameterNames) {
  Generator g(1);
  CNN m({.generator = &g});
  EXPECT_EQ(m.forward(randn({3, 1, 28, 28}, {}, &g)).shape(), (Shape{3, 10}));
  std::vector<std::string> names;
  int64_t count = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    names.push_back(name);
    count += p.numel();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "conv2.weight",
                                             "conv2.bias", "bn2.weight", "bn2.bias", "fc1.weight", "fc1.bias",
                                             "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(m.fc1->weight.shape(), (Shape{128, 1600}));  // 64 channels * 5 * 5 after two unpadded conv+pool
  EXPECT_EQ(count, (32 * 9 + 32) + 64 + (64 * 32 * 9 + 64) + 128 + (1600 * 128 + 128) + (128 * 10 + 10));
  EXPECT_EQ(m.named_buffers().size(), 6u);  // running_mean, running_var, num_batches_tracked per bn
  EXPECT_THROW(m.forward(zeros({3, 1, 32, 32})), Error);
}

TEST(CnnModel, TrainAndEvalModesDifferThroughBatchNorm) {
  Generator g(2);
  CNN m({.generator = &g});
  const Tensor x = randn({4, 1, 28, 28}, {}, &g);
  const Tensor mean_before = m.bn1->running_mean.clone();
  m.eval();
  const Tensor eval1 = m.forward(x).contiguous();
  EXPECT_EQ(m.bn1->num_batches_tracked.item<int64_t>(), 0);  // eval never updates the buffers
  m.train();
  const Tensor tr = m.forward(x).contiguous();
  EXPECT_EQ(m.bn1->num_batches_tracked.item<int64_t>(), 1);
  double diff = 0.0, moved = 0.0;
  for (int64_t i = 0; i < tr.numel(); ++i) diff += std::abs(tr.data<float>()[i] - eval1.data<float>()[i]);
  const Tensor mean_after = m.bn1->running_mean.contiguous();
  for (int64_t i = 0; i < 32; ++i) moved += std::abs(mean_after.data<float>()[i] - mean_before.data<float>()[i]);
  EXPECT_GT(diff, 1e-3);   // batch statistics differ from the initial running ones (0 mean, 1 var)
  EXPECT_GT(moved, 1e-4);  // training mode moved the running mean by momentum * batch mean
}

TEST(CnnModel, GradientsReachEveryParameterAndTrainingReducesLoss) {
  Generator g(3);
  CNN m({.generator = &g});
  const Tensor x = randn({8, 1, 28, 28}, {}, &g);
  const Tensor y = from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  const auto [first, last] = testing::fit_fixed_batch(
      m, [&](const Tensor& in) { return m.forward(in); }, x, y, 1e-3, 15);
  // Eight images with eight labels are memorised quickly; ln(10) = 2.3 at the start.
  EXPECT_LT(last, 0.5 * first);
}

TEST(CnnModel, Bf16AutocastForward) {
  Generator g(4);
  CNN m({.generator = &g});
  m.eval();
  const Tensor x = randn({2, 1, 28, 28}, {}, &g);
  amp::AutocastGuard guard({.dtype = DType::kBF16});
  const Tensor out = m.forward(x);
  EXPECT_EQ(out.shape(), (Shape{2, 10}));
  EXPECT_EQ(out.dtype(), DType::kBF16);
}

}  // namespace
}  // namespace mantissa
