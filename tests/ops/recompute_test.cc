// recompute (activation checkpointing): the same gradients as the plain graph, bit for bit, in fp32 and
// under autocast (replayed after the guard is gone), with dropout (the same masks, the stream left where the
// plain run leaves it); fewer bytes held at the peak; the errors a misuse deserves.
#include "ops/recompute/recompute.h"

#include <gtest/gtest.h>

#include <vector>

#include "framework/allocator.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/autocast.h"
#include "ops/dropout/dropout.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "tests/ops/op_test_support.h"

namespace mantissa {
namespace {

using testing::random_tensor;
using testing::values;

// A small residual MLP segment: x + W2 gelu(W1 x + b1), optionally with dropout on the hidden layer.
struct Segment {
  Tensor w1, b1, w2;
  double p = 0;
  Tensor operator()(const Tensor& x) const {
    Tensor h = gelu(linear(x, w1, b1));
    if (p > 0) h = dropout(h, p);
    return x + linear(h, w2);
  }
};

Segment make_segment(uint64_t seed, int64_t width, double p = 0) {
  Segment s{random_tensor({4 * width, width}, seed, DType::kF32, 0.2),
            random_tensor({4 * width}, seed + 1, DType::kF32, 0.1),
            random_tensor({width, 4 * width}, seed + 2, DType::kF32, 0.2), p};
  for (Tensor* t : {&s.w1, &s.b1, &s.w2}) t->set_requires_grad(true);
  return s;
}

RecomputeFn as_fn(const Segment& s) {
  return [s](const std::vector<Tensor>& in) { return std::vector<Tensor>{s(in[0])}; };
}

// The loss of `depth` segments applied in turn; `checkpointed` wraps each in recompute().
Tensor run(const std::vector<Segment>& segments, const Tensor& x, bool checkpointed) {
  Tensor h = x;
  for (const Segment& s : segments) h = checkpointed ? recompute(as_fn(s), {h})[0] : s(h);
  return sum(h * h);
}

struct Grads {
  std::vector<std::vector<double>> values;
  bool operator==(const Grads&) const = default;
};

Grads grads_of(const std::vector<Segment>& segments, const Tensor& x) {
  Grads g;
  g.values.push_back(values(x.grad()));
  for (const Segment& s : segments) {
    for (const Tensor* t : {&s.w1, &s.b1, &s.w2}) g.values.push_back(values(t->grad()));
  }
  return g;
}

void clear_grads(std::vector<Segment>& segments, Tensor& x) {
  x.set_grad(Tensor());
  for (Segment& s : segments) {
    for (Tensor* t : {&s.w1, &s.b1, &s.w2}) t->set_grad(Tensor());
  }
}

TEST(Recompute, SameGradientsAsThePlainGraphBitForBit) {
  std::vector<Segment> segments{make_segment(1, 16), make_segment(10, 16), make_segment(20, 16)};
  Tensor x = random_tensor({8, 16}, 99, DType::kF32);
  x.set_requires_grad(true);
  const Tensor plain_loss = run(segments, x, false);
  plain_loss.backward();
  const Grads plain = grads_of(segments, x);
  clear_grads(segments, x);
  const Tensor loss = run(segments, x, true);
  EXPECT_EQ(values(loss), values(plain_loss));
  loss.backward();
  EXPECT_TRUE(grads_of(segments, x) == plain) << "the recomputed graph gave other gradients";
}

TEST(Recompute, ParametersGetGradientsWhenTheInputNeedsNone) {
  std::vector<Segment> segments{make_segment(3, 8)};
  const Tensor x = random_tensor({4, 8}, 5, DType::kF32);  // data: no grad
  const Tensor loss = run(segments, x, true);
  ASSERT_TRUE(loss.requires_grad());
  loss.backward();
  EXPECT_TRUE(segments[0].w1.grad().defined());
  EXPECT_TRUE(segments[0].w2.grad().defined());
}

// The training loop's backward runs after its AutocastGuard is gone: the recomputation must run in bf16
// again, or its outputs would not even match the gradients' dtype.
TEST(Recompute, ReplaysTheForwardsAutocastStateAfterTheGuardIsGone) {
  std::vector<Segment> segments{make_segment(4, 16), make_segment(40, 16)};
  Tensor x = random_tensor({8, 16}, 7, DType::kF32);
  x.set_requires_grad(true);
  Tensor plain_loss, loss;
  {
    amp::AutocastGuard bf16({.device = DeviceType::kCPU, .dtype = DType::kBF16});
    plain_loss = run(segments, x, false);
  }
  plain_loss.backward();
  const Grads plain = grads_of(segments, x);
  clear_grads(segments, x);
  {
    amp::AutocastGuard bf16({.device = DeviceType::kCPU, .dtype = DType::kBF16});
    loss = run(segments, x, true);
  }
  EXPECT_EQ(values(loss), values(plain_loss));
  loss.backward();
  EXPECT_FALSE(amp::is_enabled(DeviceType::kCPU)) << "the replay left autocast on";
  EXPECT_TRUE(grads_of(segments, x) == plain);
}

TEST(Recompute, DropoutDrawsTheSameMasksAndTheStreamEndsWhereThePlainRunLeavesIt) {
  std::vector<Segment> segments{make_segment(6, 16, 0.3), make_segment(60, 16, 0.3)};
  Tensor x = random_tensor({8, 16}, 8, DType::kF32);
  x.set_requires_grad(true);
  default_generator().manual_seed(1234);
  const Tensor plain_loss = run(segments, x, false);
  plain_loss.backward();
  const GeneratorState plain_after = default_generator().state();
  const Grads plain = grads_of(segments, x);
  clear_grads(segments, x);
  default_generator().manual_seed(1234);
  const Tensor loss = run(segments, x, true);
  loss.backward();
  EXPECT_EQ(values(loss), values(plain_loss));
  EXPECT_TRUE(grads_of(segments, x) == plain) << "other dropout masks in the recomputation";
  EXPECT_TRUE(default_generator().state() == plain_after) << "the replay moved the random stream";
}

TEST(Recompute, HoldsFewerBytesAtThePeak) {
  std::vector<Segment> segments;
  for (int i = 0; i < 8; ++i) segments.push_back(make_segment(100 + 3 * i, 64));
  Tensor x = random_tensor({256, 64}, 9, DType::kF32);
  x.set_requires_grad(true);
  uint64_t peak[2];
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    clear_grads(segments, x);
    cpu_allocator_reset_peak();
    const uint64_t before = cpu_allocator_stats().allocated_bytes;
    run(segments, x, checkpointed == 1).backward();
    peak[checkpointed] = cpu_allocator_stats().peak_allocated_bytes - before;
  }
  // Plain: 8 segments keep [256, 256] hidden activations (several per segment); checkpointed: one segment's
  // at a time plus the 8 inputs.
  EXPECT_LT(static_cast<double>(peak[1]), 0.5 * static_cast<double>(peak[0]))
      << "peak bytes: plain " << peak[0] << ", checkpointed " << peak[1];
}

TEST(Recompute, OutsideGradModeItIsJustTheFunction) {
  const Segment s = make_segment(11, 8);
  NoGradGuard no_grad;
  const Tensor y = recompute(as_fn(s), {random_tensor({2, 8}, 12, DType::kF32)})[0];
  EXPECT_FALSE(y.requires_grad());
}

TEST(Recompute, AnOutputThatIsAnInputIsRefused) {
  Tensor x = random_tensor({2, 3}, 13, DType::kF32);
  x.set_requires_grad(true);
  try {
    recompute([](const std::vector<Tensor>& in) { return in; }, {x});
    FAIL() << "recompute returned its input as an output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is its input 0"), std::string::npos) << e.what();
  }
}

TEST(Recompute, ASecondBackwardWithoutRetainGraphSaysTheGraphWasFreed) {
  std::vector<Segment> segments{make_segment(14, 8)};
  Tensor x = random_tensor({2, 8}, 15, DType::kF32);
  x.set_requires_grad(true);
  const Tensor loss = run(segments, x, true);
  loss.backward();
  EXPECT_THROW(loss.backward(), Error);
}

}  // namespace
}  // namespace mantissa
