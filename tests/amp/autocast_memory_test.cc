// Activation memory of one MLP step (784-1024-1024-10, batch 256, relu, cross_entropy) under autocast
// against fp32: the bytes the CPU allocator holds between the end of the forward and the backward, i.e.
// everything the graph keeps for backward. Lower-precision ops save 16-bit tensors, so the saved relu
// outputs halve; the 16-bit weight copies the graph holds are counted apart. amp/README.md quotes the
// numbers this test prints.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <optional>

#include "amp/autocast.h"
#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"

namespace mantissa {
namespace {

constexpr int64_t kBatch = 256, kIn = 784, kHidden = 1024, kOut = 10;

struct Mlp {
  std::vector<Tensor> params;  // w1, b1, w2, b2, w3, b3 (fp32 masters)
};

Mlp make_mlp(uint64_t seed) {
  Generator g(seed);
  Mlp m;
  const std::vector<Shape> shapes = {{kHidden, kIn}, {kHidden}, {kHidden, kHidden}, {kHidden}, {kOut, kHidden}, {kOut}};
  for (const Shape& s : shapes) {
    Tensor p = mul(randn(s, {}, &g), 0.03);
    p.set_requires_grad(true);
    m.params.push_back(p);
  }
  return m;
}

Tensor forward(const Mlp& m, const Tensor& x, const Tensor& y) {
  const std::vector<Tensor>& p = m.params;
  Tensor h = relu(linear(x, p[0], p[1]));
  h = relu(linear(h, p[2], p[3]));
  return cross_entropy(linear(h, p[4], p[5]), y);
}

struct StepMemory {
  int64_t held_bytes = 0;  // allocated between forward end and backward, relative to before the forward
  float loss = 0;
};

// One forward (under autocast when `low` is f16/bf16) and backward; returns what the graph held.
StepMemory run_step(const Mlp& m, const Tensor& x, const Tensor& y, std::optional<DType> low) {
  for (Tensor p : m.params) p.set_grad(Tensor());  // a handle copy: the same leaf
  const int64_t before = static_cast<int64_t>(cpu_allocator_stats().allocated_bytes);
  Tensor loss;
  if (low) {
    amp::AutocastGuard g({.dtype = *low});
    loss = forward(m, x, y);
  } else {
    loss = forward(m, x, y);
  }
  StepMemory r;
  r.held_bytes = static_cast<int64_t>(cpu_allocator_stats().allocated_bytes) - before;
  r.loss = static_cast<float>(loss.item());
  EXPECT_EQ(loss.dtype(), DType::kF32);
  loss.backward();
  for (const Tensor& p : m.params) EXPECT_EQ(p.grad().dtype(), DType::kF32);
  return r;
}

TEST(AutocastMemory, MlpStepSavesHalfTheActivationBytes) {
  const Mlp m = make_mlp(7);
  Generator g(8);
  const Tensor x = randn({kBatch, kIn}, {}, &g);
  std::vector<int64_t> labels(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) labels[static_cast<size_t>(i)] = (i * 7) % kOut;
  const Tensor y = from_vector<int64_t>(labels);

  run_step(m, x, y, std::nullopt);  // warm the allocator's cache so both runs see the same size classes
  const StepMemory fp32 = run_step(m, x, y, std::nullopt);
  const StepMemory bf16 = run_step(m, x, y, DType::kBF16);
  const StepMemory f16 = run_step(m, x, y, DType::kF16);

  // The graph also keeps 16-bit weight copies: linear saves its weight for the input gradient when its
  // input requires grad, i.e. in layers 2 and 3 (w2, w3; layer 1's input x does not). fp32 saves the
  // masters themselves, which costs nothing extra. Count those copies apart (2 bytes per element).
  const int64_t weight_copies = 2 * (m.params[2].numel() + m.params[4].numel());
  const int64_t bf16_activations = bf16.held_bytes - weight_copies;
  const double ratio = static_cast<double>(bf16_activations) / static_cast<double>(fp32.held_bytes);
  std::cout << "MLP 784-1024-1024-10, batch 256, bytes held for backward:\n"
            << "  fp32:           " << fp32.held_bytes << "\n"
            << "  bf16 autocast:  " << bf16.held_bytes << " = 16-bit copies of w2, w3 " << weight_copies
            << " + activations " << bf16_activations << "\n"
            << "  f16 autocast:   " << f16.held_bytes << "\n"
            << "  activations, autocast / fp32: " << ratio << "\n";
  ::testing::Test::RecordProperty("fp32_held_bytes", std::to_string(fp32.held_bytes));
  ::testing::Test::RecordProperty("autocast_held_bytes", std::to_string(bf16.held_bytes));
  ::testing::Test::RecordProperty("autocast_activation_bytes", std::to_string(bf16_activations));

  // fp32 keeps the two [256, 1024] relu outputs (1 MiB each; the next linear saves the same tensor) and
  // the small logits: just over 2 MiB. Autocast keeps those two in 16 bits (0.5 MiB each), plus the
  // 16-bit copy of the f32 input x that the first linear saves for its weight gradient (392 KiB, in a
  // 448 KiB size class) and cross_entropy's f32 copy of the logits: 0.72 of fp32. Had the relu outputs
  // stayed f32, the activations would exceed fp32's; the bounds below allow only the 16-bit outcome.
  const int64_t relu_outputs_f32 = 2 * kBatch * kHidden * 4;
  EXPECT_GT(fp32.held_bytes, relu_outputs_f32);
  EXPECT_LT(fp32.held_bytes, relu_outputs_f32 + relu_outputs_f32 / 20);  // + logits, lse: < 5%
  const int64_t x_copy_class = 458752;  // 256 * 784 * 2 = 401408 bytes rounded up to its size class
  EXPECT_GT(bf16_activations, relu_outputs_f32 / 2 + x_copy_class);
  EXPECT_LT(bf16_activations, relu_outputs_f32 / 2 + x_copy_class + relu_outputs_f32 / 20);
  EXPECT_EQ(bf16.held_bytes, f16.held_bytes);  // the two 16-bit formats take the same room
  // The losses agree to 16-bit accuracy (the logits are rounded to 8 bits of mantissa in bf16).
  EXPECT_NEAR(bf16.loss, fp32.loss, 0.02 * std::abs(fp32.loss));
  EXPECT_NEAR(f16.loss, fp32.loss, 0.005 * std::abs(fp32.loss));
}

}  // namespace
}  // namespace mantissa
