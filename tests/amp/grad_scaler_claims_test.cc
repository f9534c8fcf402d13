// The seeds' claims about loss scaling, shown on the CPU with bit-exact f16/bf16 emulation:
// (a) gradients of ~1e-8 flush to zero in f16 without scaling and survive with it;
// (b) an init_scale of 2^40 overflows, skips exactly the predicted number of steps, then converges;
// (c) an MLP on synthetic data in f16 + scaler and in bf16 reaches the fp32 loss within 2%.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mantissa::amp {
namespace {

enum class Precision { kF32, kF16, kBF16 };

// (a) Linear regression whose loss is multiplied by 1e-8, so dL/dpred is ~1e-9 and dL/dw ~1e-8: below
// f16's smallest subnormal (6e-8) the f16 backward of linear rounds them to zero.
struct TinyGradRun {
  Tensor w;
  std::vector<double> losses;
};
TinyGradRun tiny_grad_run(Precision precision, ScalerState scaling) {
  Generator gen(21);
  const Tensor x = randn({64, 16}, {}, &gen);
  const Tensor w_true = randn({1, 16}, {}, &gen);
  const Tensor y = matmul(x, w_true.t());
  Tensor w = zeros({1, 16}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 2e7});  // ~0.2 / 1e-8: the lr the unscaled problem would use
  GradScaler scaler({.init_scale = 16777216.0, .state = scaling});  // 2^24
  TinyGradRun out;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    Tensor pred;
    if (precision == Precision::kF32) {
      pred = linear(x, w);
    } else {
      AutocastGuard guard({.dtype = DType::kF16});
      pred = linear(x, w);
    }
    Tensor loss = mul(mse_loss(pred.to(DType::kF32), y), 1e-8);
    out.losses.push_back(loss.item());
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  out.w = w;
  return out;
}

TEST(GradScalerClaims, UnderflowFlushesWithoutScalingSurvivesWithIt) {
  const TinyGradRun f32 = tiny_grad_run(Precision::kF32, ScalerState::kDisabled);
  const TinyGradRun f16 = tiny_grad_run(Precision::kF16, ScalerState::kDisabled);
  const TinyGradRun scaled = tiny_grad_run(Precision::kF16, ScalerState::kEnabled);
  // fp32 learns: the loss falls by orders of magnitude.
  EXPECT_LT(f32.losses.back(), 1e-3 * f32.losses.front());
  // f16 without scaling: every grad flushed, the weights never moved.
  EXPECT_EQ(sum(abs(f16.w)).item(), 0.0);
  EXPECT_EQ(f16.losses.back(), f16.losses.front());
  // f16 with the scaler follows fp32: the same weights up to f16's rounding of activations and grads
  // (a few ulps of 2^-10 relative on O(1) weights).
  for (int64_t i = 0; i < 16; ++i) EXPECT_NEAR(scaled.w.data<float>()[i], f32.w.data<float>()[i], 1e-2) << i;
  EXPECT_LT(scaled.losses.back(), 1e-3 * scaled.losses.front());
}

// (b) loss = sum((f16(w) - t)^2) in f16. The scaled backward is finite iff the incoming grad (the scale
// itself, in f16) and d(loss)/d(diff) = 2 * (w - t) * scale are both <= 65504, f16's largest value.
TEST(GradScalerClaims, HugeInitScaleSkipsThePredictedStepsThenConverges) {
  Generator gen(3);
  const Tensor t = mul(rand({32}, {}, &gen), 3.0);  // in [0, 3)
  Tensor w = zeros({32}, {.requires_grad = true});
  SGD opt({{"w", w}}, {.lr = 0.1});
  GradScaler scaler({.init_scale = std::ldexp(1.0, 40)});
  const double max_diff = max(abs(t)).item();
  int predicted_skips = 0;
  for (double s = std::ldexp(1.0, 40); !(s <= 65504.0 && 2.0 * max_diff * s <= 65504.0); s *= 0.5) ++predicted_skips;
  ASSERT_GT(predicted_skips, 24);  // at least down from 2^40 to 2^15
  const Tensor t16 = t.to(DType::kF16);
  auto loss_of = [&] {
    Tensor d = sub(w.to(DType::kF16), t16);
    return sum(mul(d, d));
  };
  const double first_loss = loss_of().item();
  int skipped = 0, first_applied = -1;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    scaler.scale(loss_of()).backward();
    const bool applied = scaler.step(opt);
    scaler.update();
    if (!applied) {
      ++skipped;
      EXPECT_EQ(sum(abs(w)).item(), 0.0) << "a skipped step moved the weights";
    } else if (first_applied < 0) {
      first_applied = step;
    }
  }
  EXPECT_EQ(skipped, predicted_skips);
  EXPECT_EQ(first_applied, predicted_skips);  // every skip came first, in a row
  EXPECT_EQ(scaler.stats().skipped_steps, predicted_skips);
  // Converged: f16 rounding of w - t (2^-11 relative on values below 3) bounds the final loss.
  EXPECT_LT(loss_of().item(), 1e-4 * first_loss);
}

// (c) A two-layer MLP classifier on a noisy synthetic task, Adam, 150 full-batch steps; the final
// training loss, evaluated in fp32 for every run, is compared.
std::shared_ptr<Sequential> make_mlp() {
  Generator gen(8);
  return std::make_shared<Sequential>(std::make_shared<Linear>(20, 64, LinearOptions{.generator = &gen}),
                                      std::make_shared<ReLU>(),
                                      std::make_shared<Linear>(64, 4, LinearOptions{.generator = &gen}));
}

double train_mlp(Precision precision) {
  Generator gen(99);
  const Tensor x = randn({256, 20}, {}, &gen);
  // Labels from a random linear teacher plus noise (the MLP, 256 samples, still fits them: measured final
  // losses fp32 0.00267, f16 + scaler 0.00267, bf16 0.00270).
  const Tensor teacher = randn({4, 20}, {}, &gen);
  const Tensor labels = argmax(add(matmul(x, teacher.t()), mul(randn({256, 4}, {}, &gen), 2.0)), 1);
  auto mlp = make_mlp();
  Adam opt(mlp->named_parameters(), {.lr = 1e-2});
  GradScaler scaler({.state = precision == Precision::kF16 ? ScalerState::kEnabled : ScalerState::kDisabled});
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Tensor loss;
    if (precision == Precision::kF32) {
      loss = cross_entropy(mlp->forward(x), labels);
    } else {
      AutocastGuard guard({.dtype = precision == Precision::kF16 ? DType::kF16 : DType::kBF16});
      loss = cross_entropy(mlp->forward(x), labels);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  return cross_entropy(mlp->forward(x), labels).item();
}

TEST(GradScalerClaims, MlpInF16AndBf16ReachesTheFp32Loss) {
  const double f32 = train_mlp(Precision::kF32);
  const double f16 = train_mlp(Precision::kF16);
  const double bf16 = train_mlp(Precision::kBF16);
  EXPECT_LT(f32, 0.05);  // it fits the training set (chance level is log 4 = 1.39)
  EXPECT_NEAR(f16, f32, 0.02 * f32) << "f16 + scaler";
  EXPECT_NEAR(bf16, f32, 0.02 * f32) << "bf16";
}

}  // namespace
}  // namespace mantissa::amp
