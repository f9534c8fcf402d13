// Layers: forward shapes and values, parameter names, PyTorch's default initialisation (ranges and
// determinism with a seed), train/eval behaviour, Sequential's "0", "1", ... children.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/conv.h"
#include "models/layers/conv_bn.h"
#include "models/layers/dropout.h"
#include "models/layers/embedding.h"
#include "models/layers/flatten.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"
#include "models/layers/pool.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> names(const std::vector<NamedTensor>& list) {
  std::vector<std::string> out;
  for (const auto& e : list) out.push_back(e.name);
  return out;
}

// y = x * w: a one-parameter layer for Sequential tests.
struct Scale : Module {
  Tensor w;
  explicit Scale(double v) { w = register_parameter("w", full({1}, v)); }
  std::string type_name() const override { return "Scale"; }
  Tensor forward(const Tensor& x) { return x * w; }
};

TEST(Layers, ReluGeluValues) {
  Tensor x = from_vector<float>({-1.0f, 0.0f, 2.0f});
  ReLU relu_layer;
  Tensor r = relu_layer.forward(x);
  EXPECT_THAT(std::vector<float>(r.data<float>(), r.data<float>() + 3), ElementsAre(0.0f, 0.0f, 2.0f));
  GELU gelu_erf, gelu_tanh({.approximate = GeluApproximation::kTanh});
  // gelu(2) = 2 * Phi(2) = 1.9544997 (erf form); the tanh form gives 1.9545977. float: 1e-6.
  EXPECT_NEAR(gelu_erf.forward(x).data<float>()[2], 1.9544997, 1e-6);
  EXPECT_NEAR(gelu_tanh.forward(x).data<float>()[2], 1.9545977, 1e-6);
  EXPECT_TRUE(relu_layer.named_parameters().empty());
}

TEST(Layers, FlattenShapes) {
  Tensor x = zeros({2, 3, 4, 5});
  EXPECT_EQ(Flatten().forward(x).shape(), (Shape{2, 60}));
  EXPECT_EQ(Flatten({.start_dim = 0}).forward(x).shape(), (Shape{120}));
  EXPECT_EQ(Flatten({.start_dim = 1, .end_dim = 2}).forward(x).shape(), (Shape{2, 12, 5}));
  EXPECT_TRUE(Flatten().forward(x).shares_storage(x));  // a view of a contiguous input
}

TEST(Layers, SequentialNamesAndForward) {
  auto seq = std::make_shared<Sequential>(std::make_shared<Scale>(2.0), std::make_shared<ReLU>(),
                                          std::make_shared<Scale>(-3.0));
  auto tail = seq->push_back(std::make_shared<Flatten>(FlattenOptions{.start_dim = 0}));
  EXPECT_EQ(seq->size(), 4u);
  EXPECT_THAT(names(seq->named_parameters()), ElementsAre("0.w", "2.w"));
  EXPECT_EQ((*seq)[3], tail);
  EXPECT_EQ(seq->at<Scale>(2)->w.data<float>()[0], -3.0f);
  EXPECT_THAT([&] { seq->at<Scale>(1); }, ::testing::ThrowsMessage<Error>(HasSubstr("layer 1 is a ReLU")));
  EXPECT_THAT([&] { (*seq)[4]; }, ::testing::ThrowsMessage<Error>(HasSubstr("index 4 is out of range for 4")));

  Tensor x = from_vector<float>({1.0f, -1.0f}, {2, 1});
  Tensor y = seq->forward(x);  // -3 * relu(2 x), flattened
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(y.data<float>()[0], -6.0f);
  EXPECT_EQ(y.data<float>()[1], 0.0f);
  sum(y).backward();
  // y0 = -3 relu(2 x0) with x0 = 1 gives dy0/dw0 = -3 x0; y1 is cut off by the ReLU.
  EXPECT_EQ(seq->at<Scale>(0)->w.grad().data<float>()[0], -3.0f);
  EXPECT_EQ(seq->at<Scale>(2)->w.grad().data<float>()[0], 2.0f);  // relu(2 x0) + relu(2 x1) = 2
  // Nested: names gain the outer index.
  Sequential outer(seq, std::make_shared<Scale>(1.0));
  EXPECT_THAT(names(outer.named_parameters()), ElementsAre("0.0.w", "0.2.w", "1.w"));
  EXPECT_TRUE(Sequential().forward(x).is_same(x));
}

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

bool equal(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && values(a) == values(b); }

// Every value within [-bound, bound], and the extremes near both ends (uniform, not squeezed).
void expect_uniform_within(const Tensor& t, double bound) {
  const auto v = values(t);
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, -bound);
  EXPECT_LE(*hi, bound);
  // With n >= 16 draws from U(-b, b), P(max < 0.75 b) = 0.875^n < 0.12 per side at n = 16; every tensor
  // checked here has at least 64 values (P < 2e-4) and a fixed seed, so this cannot flake.
  EXPECT_GT(*hi, 0.75 * bound);
  EXPECT_LT(*lo, -0.75 * bound);
}

TEST(Layers, LinearInitAndForward) {
  Generator gen(11);
  Linear fc(64, 32, {.generator = &gen});
  EXPECT_THAT(names(fc.named_parameters()), ElementsAre("weight", "bias"));
  EXPECT_EQ(fc.weight.shape(), (Shape{32, 64}));
  expect_uniform_within(fc.weight, 1.0 / 8.0);  // 1/sqrt(fan_in = 64)
  expect_uniform_within(fc.bias, 1.0 / 8.0);
  // Same seed, same weights; another seed, other weights; the default generator follows manual_seed.
  Generator again(11), other(12);
  EXPECT_TRUE(equal(Linear(64, 32, {.generator = &again}).weight, fc.weight));
  EXPECT_FALSE(equal(Linear(64, 32, {.generator = &other}).weight, fc.weight));
  manual_seed(5);
  const Tensor w1 = Linear(8, 8).weight;
  manual_seed(5);
  EXPECT_TRUE(equal(Linear(8, 8).weight, w1));

  EXPECT_EQ(fc.forward(zeros({4, 64})).shape(), (Shape{4, 32}));
  EXPECT_EQ(fc.forward(zeros({2, 3, 64})).shape(), (Shape{2, 3, 32}));
  EXPECT_THAT([&] { fc.forward(zeros({4, 63})); }, ::testing::ThrowsMessage<Error>(HasSubstr("Linear: expected")));
  // y = x W^T + b on a hand-made case.
  Linear small(2, 1);
  small.load_state_dict(std::map<std::string, Tensor>{{"weight", from_vector<float>({2, -1}, {1, 2})},
                                                      {"bias", from_vector<float>({0.5f})}});
  EXPECT_EQ(small.forward(from_vector<float>({3, 4}, {1, 2})).item(), 2.5);  // 6 - 4 + 0.5
  Linear no_bias(4, 3, {.bias = false});
  EXPECT_THAT(names(no_bias.named_parameters()), ElementsAre("weight"));
  EXPECT_FALSE(no_bias.bias.defined());
}

TEST(Layers, Conv2dInitAndShapes) {
  Generator gen(3);
  Conv2d conv(3, 8, {3, 3}, {.padding = {1, 1}, .generator = &gen});
  EXPECT_EQ(conv.weight.shape(), (Shape{8, 3, 3, 3}));
  expect_uniform_within(conv.weight, 1.0 / std::sqrt(27.0));  // fan_in = 3 * 3 * 3
  EXPECT_EQ(conv.forward(zeros({2, 3, 10, 10})).shape(), (Shape{2, 8, 10, 10}));
  Conv2d strided(4, 8, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2, .generator = &gen});
  EXPECT_EQ(strided.weight.shape(), (Shape{8, 2, 3, 3}));
  expect_uniform_within(strided.weight, 1.0 / std::sqrt(18.0));  // fan_in = 4 / 2 * 3 * 3
  EXPECT_EQ(strided.forward(zeros({1, 4, 10, 10})).shape(), (Shape{1, 8, 5, 5}));
  EXPECT_THAT(
      [] {
        Conv2d(3, 8, {3, 3}, {.groups = 2});
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("divisible by groups 2")));
  EXPECT_THAT(
      [&] {
        conv.forward(zeros({2, 4, 10, 10}));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("Conv2d: expected an input [N, 3, H, W]")));
}

TEST(Layers, BatchNorm2dTrainAndEval) {
  BatchNorm2d bn(2);
  EXPECT_THAT(names(bn.named_parameters()), ElementsAre("weight", "bias"));
  EXPECT_THAT(names(bn.state_dict()),
              ElementsAre("weight", "bias", "running_mean", "running_var", "num_batches_tracked"));
  EXPECT_EQ(values(bn.weight), (std::vector<float>{1, 1}));
  EXPECT_EQ(values(bn.bias), (std::vector<float>{0, 0}));
  // Channel 0 holds 1..4, channel 1 holds 10 everywhere: batch means 2.5 and 10, unbiased vars 5/3 and 0.
  Tensor x = from_vector<float>({1, 2, 3, 4, 10, 10, 10, 10}, {1, 2, 2, 2});
  Tensor y = bn.forward(x);
  EXPECT_EQ(y.shape(), x.shape());
  // Normalised with the biased variance 1.25: (1 - 2.5) / sqrt(1.25 + 1e-5); float: 1e-5.
  EXPECT_NEAR(y.data<float>()[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
  EXPECT_NEAR(y.data<float>()[4], 0.0, 1e-6);
  // running = 0.9 * running + 0.1 * batch (unbiased variance), as PyTorch.
  EXPECT_NEAR(bn.running_mean.data<float>()[0], 0.25, 1e-6);
  EXPECT_NEAR(bn.running_mean.data<float>()[1], 1.0, 1e-6);
  EXPECT_NEAR(bn.running_var.data<float>()[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(bn.running_var.data<float>()[1], 0.9, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  // Eval: the running statistics, left unchanged.
  bn.eval();
  Tensor z = bn.forward(x);
  EXPECT_NEAR(z.data<float>()[4], (10.0 - 1.0) / std::sqrt(0.9 + 1e-5), 1e-5);
  EXPECT_NEAR(bn.running_mean.data<float>()[1], 1.0, 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  BatchNorm2d plain(3, {.affine = false});
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_EQ(plain.forward(zeros({2, 3, 2, 2})).shape(), (Shape{2, 3, 2, 2}));
  EXPECT_THAT(
      [&] {
        bn.forward(zeros({2, 3, 4, 4}));
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("BatchNorm2d: expected an input [N, 2, H, W]")));
}

TEST(Layers, LayerNormNormalisesTrailingDims) {
  LayerNorm ln({4});
  EXPECT_THAT(names(ln.named_parameters()), ElementsAre("weight", "bias"));
  Tensor y = ln.forward(from_vector<float>({1, 2, 3, 4, -2, 0, 2, 4}, {2, 4}));
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  // Row 0: mean 2.5, biased var 1.25; row 1: mean 1, var 5. float: 1e-5.
  EXPECT_NEAR(y.data<float>()[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
  EXPECT_NEAR(y.data<float>()[7], 3.0 / std::sqrt(5.0 + 1e-5), 1e-5);
  EXPECT_TRUE(LayerNorm({4}, {.elementwise_affine = false}).named_parameters().empty());
}

TEST(Layers, EmbeddingInitAndLookup) {
  Generator gen(21);
  Embedding emb(200, 16, {.generator = &gen});
  const auto v = values(emb.weight);
  double mean = 0.0, sq = 0.0;
  for (float x : v) mean += x, sq += double(x) * x;
  mean /= v.size();
  const double stddev = std::sqrt(sq / v.size() - mean * mean);
  // N(0, 1) over 3200 draws: the mean's standard error is 0.018 and the std's about 0.0125; 5 sigma.
  EXPECT_LT(std::abs(mean), 0.09);
  EXPECT_LT(std::abs(stddev - 1.0), 0.065);
  Tensor idx = from_vector<int64_t>({3, 0, 199, 3, 5, 7}, {2, 3});
  Tensor out = emb.forward(idx);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 16}));
  EXPECT_EQ(out.data<float>()[2 * 16 + 5], emb.weight.data<float>()[199 * 16 + 5]);
  Generator again(21);
  EXPECT_TRUE(equal(Embedding(200, 16, {.generator = &again}).weight, emb.weight));
}

TEST(Layers, DropoutOnlyInTraining) {
  Generator gen(4);
  Dropout drop({.p = 0.5, .generator = &gen});
  Tensor x = ones({1000});
  const auto v = values(drop.forward(x));
  int64_t zeros_seen = 0;
  for (float e : v) {
    EXPECT_TRUE(e == 0.0f || e == 2.0f);  // survivors scaled by 1 / (1 - p)
    zeros_seen += e == 0.0f;
  }
  EXPECT_GT(zeros_seen, 400);  // Binomial(1000, 0.5): 500 +- 16 per sigma
  EXPECT_LT(zeros_seen, 600);
  drop.eval();
  EXPECT_TRUE(drop.forward(x).is_same(x));
  EXPECT_THAT([] { Dropout({.p = 1.5}); }, ::testing::ThrowsMessage<Error>(HasSubstr("p must be in [0, 1]")));
}

TEST(Layers, MaxPool2dShapesAndValues) {
  MaxPool2d pool({.kernel_size = {2, 2}});
  Tensor x = arange(16.0, {.dtype = DType::kF32}).reshape({1, 1, 4, 4});
  Tensor y = pool.forward(x);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values(y), (std::vector<float>{5, 7, 13, 15}));
  EXPECT_EQ(
      MaxPool2d({.kernel_size = {3, 3}, .stride = {1, 1}, .padding = {1, 1}}).forward(zeros({2, 3, 5, 7})).shape(),
      (Shape{2, 3, 5, 7}));
}

TEST(Layers, ConvNetInSequential) {
  Generator gen(8);
  Sequential net(std::make_shared<Conv2d>(1, 4, std::array<int64_t, 2>{3, 3},
                                          Conv2dLayerOptions{.padding = {1, 1}, .generator = &gen}),
                 std::make_shared<BatchNorm2d>(4), std::make_shared<ReLU>(),
                 std::make_shared<MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}), std::make_shared<Flatten>(),
                 std::make_shared<Dropout>(DropoutOptions{.p = 0.1, .generator = &gen}),
                 std::make_shared<Linear>(4 * 4 * 4, 10, LinearOptions{.generator = &gen}));
  EXPECT_THAT(names(net.state_dict()), ElementsAre("0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                                   "1.running_var", "1.num_batches_tracked", "6.weight", "6.bias"));
  Tensor out = net.forward(randn({2, 1, 8, 8}, {}, &gen));
  EXPECT_EQ(out.shape(), (Shape{2, 10}));
  sum(out).backward();
  for (const auto& [name, p] : net.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  net.eval();
  EXPECT_FALSE(net.at<Dropout>(5)->is_training());
}

// Conv2d + BatchNorm2d folded for eval: the same function as the pair up to rounding, gradients still
// reaching both modules, and no fold where it would change behaviour (training mode, hooks).
TEST(ConvBatchNormFold, EqualsThePairInEvalMode) {
  Generator gen(8);
  for (DType dtype : {DType::kF64, DType::kF32}) {
    Conv2d conv(3, 5, {3, 3}, {.padding = {1, 1}, .dtype = dtype, .generator = &gen});
    BatchNorm2d bn(5, {.dtype = dtype});
    // Statistics and affine parameters away from their defaults, as after training.
    bn.running_mean = randn({5}, {.dtype = dtype}, &gen);
    bn.running_var = rand({5}, {.dtype = dtype}, &gen) + 0.5;
    copy_(bn.weight, randn({5}, {.dtype = dtype}, &gen));
    copy_(bn.bias, randn({5}, {.dtype = dtype}, &gen));
    bn.eval();
    ASSERT_TRUE(can_fold_batch_norm(conv, bn));
    const Tensor x = randn({2, 3, 7, 6}, {.dtype = dtype}, &gen);
    const Tensor want = bn.forward(conv.forward(x)).to(DType::kF64);
    const Tensor got = conv2d_batch_norm_eval(conv, bn, x).to(DType::kF64);
    const double scale = max(abs(want)).item();
    // f32: the fold rounds w * s once more than the pair; a 27-term dot product, then one scale.
    EXPECT_LT(max(abs(got - want)).item() / scale, dtype == DType::kF64 ? 1e-13 : 2e-6) << dtype_name(dtype);
  }
}

TEST(ConvBatchNormFold, GradientsReachBothModules) {
  Generator gen(9);
  Conv2d conv(2, 3, {3, 3}, {.dtype = DType::kF64, .generator = &gen});
  BatchNorm2d bn(3, {.dtype = DType::kF64});
  bn.eval();
  const Tensor x = randn({1, 2, 5, 5}, {.dtype = DType::kF64}, &gen);
  sum(conv2d_batch_norm_eval(conv, bn, x)).backward();
  Conv2d conv2(2, 3, {3, 3}, {.dtype = DType::kF64});
  BatchNorm2d bn2(3, {.dtype = DType::kF64});
  copy_(conv2.weight, conv.weight.detach());
  copy_(conv2.bias, conv.bias.detach());
  bn2.eval();
  sum(bn2.forward(conv2.forward(x))).backward();
  for (auto [a, b] :
       {std::pair{conv.weight, conv2.weight}, {conv.bias, conv2.bias}, {bn.weight, bn2.weight}, {bn.bias, bn2.bias}}) {
    ASSERT_TRUE(a.grad().defined());
    EXPECT_LT(max(abs(a.grad() - b.grad())).item(), 1e-12);
  }
}

TEST(ConvBatchNormFold, NotInTrainingModeOrWithHooks) {
  Conv2d conv(2, 3, {3, 3});
  BatchNorm2d bn(3);
  EXPECT_FALSE(can_fold_batch_norm(conv, bn)) << "training mode uses the batch's statistics";
  bn.eval();
  EXPECT_TRUE(can_fold_batch_norm(conv, bn));
  HookHandle h = bn.register_forward_hook([](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {});
  EXPECT_FALSE(can_fold_batch_norm(conv, bn)) << "a fold would skip the hook";
  h.remove();
  EXPECT_TRUE(can_fold_batch_norm(conv, bn));
  try {
    bn.train();
    conv2d_batch_norm_eval(conv, bn, zeros({1, 2, 5, 5}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("must be in eval mode"));
  }
}

}  // namespace
}  // namespace mantissa
