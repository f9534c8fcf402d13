// amp/fp8_linear.h: the forward and backward of fp8_linear bit for bit against references computed here
// (every operand cast element by element with framework/float8.h's scalar types at the role's scale,
// decoded, through scaled_mm's GEMM and epilogue as tests/support/scaled_mm_reference.h writes them), with leading
// dims, without bias, under bf16 autocast; what each cast records into the state (amaxes, overflow counts, dynamic
// scales); a no-grad forward leaving the state alone; saturation and its absence in the backward.
#include "amp/fp8_linear.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "tests/support/scaled_mm_reference.h"

namespace mantissa::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor uniform(const Shape& shape, uint32_t seed, float bound) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(gen);
  return from_vector<float>(v, shape);
}

std::vector<float> f32_values(const Tensor& t) {
  const Tensor c = t.to(DType::kF32).contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

// x cast to FP8 at `scale` (x * scale in f32, then the scalar cast) and decoded back to f32.
Tensor cast_decoded(const Tensor& x, float scale, DType fp8, Fp8Overflow overflow) {
  std::vector<float> v = f32_values(x);
  for (float& e : v) {
    const float y = e * scale;
    e = fp8 == DType::kF8E4M3 ? static_cast<float>(Float8E4M3(y, overflow))
                              : static_cast<float>(Float8E5M2(y, overflow));
  }
  return from_vector<float>(v, x.shape());
}

void expect_same_bits(const Tensor& expected, const Tensor& actual) {
  ASSERT_EQ(expected.shape(), actual.shape());
  ASSERT_EQ(expected.dtype(), actual.dtype());
  const std::vector<float> e = f32_values(expected), a = f32_values(actual);
  int64_t differ = 0;
  for (size_t i = 0; i < e.size(); ++i)
    if (std::bit_cast<uint32_t>(e[i]) != std::bit_cast<uint32_t>(a[i])) ++differ;
  EXPECT_EQ(differ, 0) << "of " << e.size() << " elements";
}

// A delayed state with the scales given (as if earlier steps had set them).
std::shared_ptr<Fp8LinearState> state_with_scales(const Fp8Recipe& recipe, float sx, float sw, float sg) {
  auto state = Fp8LinearState::make("layer.weight", recipe, kCPU);
  const float scales[] = {sx, sw, sg};
  for (Fp8Role r : kFp8Roles) {
    state->role(r).scale = scalar_tensor(scales[static_cast<size_t>(r)]);
    state->role(r).scale_inv = fp8_reciprocal(state->role(r).scale);
  }
  return state;
}

float current_amax(const Fp8TensorState& s) { return s.amax_history.select(0, s.slot).item<float>(); }

struct Case {
  Shape x_shape;
  bool bias;
  std::optional<DType> autocast;
};

TEST(Fp8Linear, ForwardAndBackwardMatchTheDecodedReference) {
  const float sx = 64.0f, sw = 128.0f, sg = 2048.0f;  // x, w within +-2 and +-1: no overflow
  for (const Case& c : {Case{{8, 32}, true, std::nullopt}, Case{{2, 3, 32}, true, std::nullopt},
                        Case{{2, 3, 32}, false, std::nullopt}, Case{{4, 32}, true, DType::kBF16}}) {
    SCOPED_TRACE(shape_str(c.x_shape) + (c.bias ? " bias" : "") + (c.autocast ? " bf16 autocast" : ""));
    const Fp8Recipe recipe = Fp8Recipe::delayed();
    auto state = state_with_scales(recipe, sx, sw, sg);
    Tensor x = uniform(c.x_shape, 1, 2.0f), w = uniform({16, 32}, 2, 1.0f), b = uniform({16}, 3, 1.0f);
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    const Tensor bias = c.bias ? b : Tensor();
    Tensor y;
    {
      std::optional<AutocastGuard> autocast;
      if (c.autocast) autocast.emplace(AutocastOptions{.dtype = *c.autocast});
      y = fp8_linear(x, w, bias, state);
    }
    const DType out_dtype = c.autocast.value_or(DType::kF32);
    Shape y_shape = c.x_shape;
    y_shape.back() = 16;
    ASSERT_EQ(y.shape(), y_shape);
    EXPECT_EQ(y.dtype(), out_dtype);
    EXPECT_EQ(y.grad_fn()->name(), "Fp8LinearBackward");

    const Tensor xd = cast_decoded(x.reshape({-1, 32}), sx, DType::kF8E4M3, Fp8Overflow::kSaturate);
    const Tensor wd = cast_decoded(w, sw, DType::kF8E4M3, Fp8Overflow::kSaturate);
    expect_same_bits(
        testing::scaled_mm_reference(xd, wd.t(), 1.0f / sx, 1.0f / sw, out_dtype, c.bias ? b.detach() : Tensor())
            .view(y_shape),
        y);

    const Tensor g = uniform(y_shape, 4, 0.5f).to(out_dtype);
    y.backward(g);
    const Tensor gd = cast_decoded(g.reshape({-1, 16}), sg, DType::kF8E5M2, Fp8Overflow::kSaturate);
    expect_same_bits(testing::scaled_mm_reference(gd, wd, 1.0f / sg, 1.0f / sw, DType::kF32, Tensor()).view(c.x_shape),
                     x.grad());
    expect_same_bits(testing::scaled_mm_reference(gd.t(), xd, 1.0f / sg, 1.0f / sx, DType::kF32, Tensor()), w.grad());
    if (c.bias) {
      expect_same_bits(sum(g.reshape({-1, 16}).to(DType::kF32), {0}), b.grad());
    } else {
      EXPECT_FALSE(b.grad().defined());
    }
    // Every cast recorded its amax in the current entry, and nothing overflowed.
    EXPECT_EQ(current_amax(state->role(Fp8Role::kInput)), max(abs(x.detach())).item<float>());
    EXPECT_EQ(current_amax(state->role(Fp8Role::kWeight)), max(abs(w.detach())).item<float>());
    EXPECT_EQ(current_amax(state->role(Fp8Role::kGradOutput)), max(abs(g.to(DType::kF32))).item<float>());
    for (Fp8Role r : kFp8Roles) EXPECT_EQ(state->role(r).overflow_count.item(), 0.0);
  }
}

TEST(Fp8Linear, E4M3FormatCastsTheGradientToE4M3) {
  Fp8Recipe recipe = Fp8Recipe::delayed();
  recipe.format = Fp8Format::kE4M3;
  auto state = state_with_scales(recipe, 64.0f, 128.0f, 256.0f);
  Tensor x = uniform({8, 16}, 5, 2.0f), w = uniform({16, 16}, 6, 1.0f);
  w.set_requires_grad(true);
  Tensor y = fp8_linear(x, w, Tensor(), state);
  const Tensor g = uniform({8, 16}, 7, 1.0f);
  y.backward(g);
  const Tensor xd = cast_decoded(x, 64.0f, DType::kF8E4M3, Fp8Overflow::kSaturate);
  const Tensor gd = cast_decoded(g, 256.0f, DType::kF8E4M3, Fp8Overflow::kSaturate);
  expect_same_bits(testing::scaled_mm_reference(gd.t(), xd, 1.0f / 256.0f, 1.0f / 64.0f, DType::kF32, Tensor()),
                   w.grad());
}

TEST(Fp8Linear, DynamicScalingCastsWithTheTensorsOwnAmax) {
  Fp8Recipe recipe = Fp8Recipe::dynamic();
  recipe.weight.margin = 1;
  auto state = Fp8LinearState::make("w", recipe, kCPU);
  Tensor x = uniform({8, 16}, 8, 3.0f), w = uniform({16, 16}, 9, 0.5f), b = uniform({16}, 10, 1.0f);
  w.set_requires_grad(true);
  x.set_requires_grad(true);
  const Tensor y = fp8_linear(x, w, b, state);
  const float ax = max(abs(x.detach())).item<float>(), aw = max(abs(w.detach())).item<float>();
  const float sx = 448.0f / ax, sw = (448.0f / aw) / 2.0f;  // torchao's amax_to_scale, TE's margin
  EXPECT_EQ(state->role(Fp8Role::kInput).scale.item<float>(), sx);
  EXPECT_EQ(state->role(Fp8Role::kWeight).scale.item<float>(), sw);
  const Tensor xd = cast_decoded(x, sx, DType::kF8E4M3, Fp8Overflow::kSaturate);
  const Tensor wd = cast_decoded(w, sw, DType::kF8E4M3, Fp8Overflow::kSaturate);
  expect_same_bits(testing::scaled_mm_reference(xd, wd.t(), 1.0f / sx, 1.0f / sw, DType::kF32, b), y);
  const Tensor g = uniform({8, 16}, 11, 1e-3f);
  y.backward(g);
  const float sg = 57344.0f / max(abs(g)).item<float>();
  EXPECT_EQ(state->role(Fp8Role::kGradOutput).scale.item<float>(), sg);
  const Tensor gd = cast_decoded(g, sg, DType::kF8E5M2, Fp8Overflow::kSaturate);
  expect_same_bits(testing::scaled_mm_reference(gd, wd, 1.0f / sg, 1.0f / sw, DType::kF32, Tensor()), x.grad());
  for (Fp8Role r : kFp8Roles) EXPECT_EQ(state->role(r).overflow_count.item(), 0.0);  // amax fits by construction
}

TEST(Fp8Linear, CastsFoldIntoOneEntryAndCountOverflows) {
  // Scale 1 (a first step): an input of 500 saturates to 448 in E4M3, and is counted.
  auto state = Fp8LinearState::make("w", Fp8Recipe::delayed(), kCPU);
  Tensor w = uniform({16, 16}, 12, 1.0f);
  Tensor x1 = uniform({4, 16}, 13, 1.0f), x2 = uniform({4, 16}, 14, 1.0f);
  x2.data<float>()[3] = 500.0f;
  x2.data<float>()[7] = -600.0f;
  const Tensor y1 = fp8_linear(x1, w, Tensor(), state, Fp8StateUpdate::kRecord);
  const Tensor y2 = fp8_linear(x2, w, Tensor(), state, Fp8StateUpdate::kRecord);
  EXPECT_EQ(current_amax(state->role(Fp8Role::kInput)), 600.0f);  // the max over both casts
  EXPECT_EQ(state->role(Fp8Role::kInput).overflow_count.item(), 2.0);
  EXPECT_EQ(state->role(Fp8Role::kWeight).overflow_count.item(), 0.0);
  const Tensor xd = cast_decoded(x2, 1.0f, DType::kF8E4M3, Fp8Overflow::kSaturate);
  EXPECT_EQ(xd.data<float>()[3], 448.0f);
  expect_same_bits(testing::scaled_mm_reference(xd, cast_decoded(w, 1.0f, DType::kF8E4M3, Fp8Overflow::kSaturate).t(),
                                                1, 1, DType::kF32, {}),
                   y2);
}

TEST(Fp8Linear, NoGradForwardLeavesTheStateAlone) {
  auto state = state_with_scales(Fp8Recipe::delayed(), 4.0f, 8.0f, 16.0f);
  Tensor x = uniform({4, 16}, 15, 1000.0f), w = uniform({16, 16}, 16, 1.0f);  // x overflows at scale 4
  Tensor y;
  {
    NoGradGuard no_grad;
    y = fp8_linear(x, w, Tensor(), state);
  }
  for (Fp8Role r : kFp8Roles) {
    EXPECT_EQ(current_amax(state->role(r)), 0.0f);
    EXPECT_EQ(state->role(r).overflow_count.item(), 0.0);
  }
  EXPECT_EQ(state->role(Fp8Role::kInput).scale.item<float>(), 4.0f);
  // It still casts with the current scales.
  expect_same_bits(testing::scaled_mm_reference(cast_decoded(x, 4.0f, DType::kF8E4M3, Fp8Overflow::kSaturate),
                                                cast_decoded(w, 8.0f, DType::kF8E4M3, Fp8Overflow::kSaturate).t(),
                                                0.25f, 0.125f, DType::kF32, Tensor()),
                   y);
}

TEST(Fp8Linear, BackwardSaturatesOrMakesInfAsTheRecipeSays) {
  for (Fp8Overflow mode : {Fp8Overflow::kSaturate, Fp8Overflow::kNoSaturate}) {
    SCOPED_TRACE(mode == Fp8Overflow::kSaturate ? "saturate" : "no_saturate");
    Fp8Recipe recipe = Fp8Recipe::delayed();
    recipe.backward_overflow = mode;
    auto state = Fp8LinearState::make("w", recipe, kCPU);
    Tensor w = uniform({16, 16}, 17, 1.0f);
    w.set_requires_grad(true);
    const Tensor x = uniform({4, 16}, 18, 1.0f);
    const Tensor y = fp8_linear(x, w, Tensor(), state);
    Tensor g = uniform({4, 16}, 19, 1.0f);
    g.data<float>()[5] = 1e5f;  // above E5M2's 57344 at scale 1
    y.backward(g);
    EXPECT_EQ(state->role(Fp8Role::kGradOutput).overflow_count.item(), 1.0);
    const Tensor gd = cast_decoded(g, 1.0f, DType::kF8E5M2, mode);
    EXPECT_EQ(gd.data<float>()[5], mode == Fp8Overflow::kSaturate ? 57344.0f : kInf);
    const Tensor xd = cast_decoded(x, 1.0f, DType::kF8E4M3, Fp8Overflow::kSaturate);
    const Tensor expected = testing::scaled_mm_reference(gd.t(), xd, 1.0f, 1.0f, DType::kF32, Tensor());
    expect_same_bits(expected, w.grad());
    const bool finite = std::isfinite(sum(abs(w.grad())).item());
    EXPECT_EQ(finite, mode == Fp8Overflow::kSaturate);
  }
}

TEST(Fp8Linear, RefusesWhatItCannotCast) {
  auto state = Fp8LinearState::make("w", Fp8Recipe::delayed(), kCPU);
  const Tensor w = uniform({16, 32}, 20, 1.0f);
  EXPECT_THROW(fp8_linear(uniform({4, 16}, 21, 1.0f), w, Tensor(), state), Error);  // in features differ
  EXPECT_THROW(fp8_linear(uniform({4, 32}, 21, 1.0f).to(DType::kF64), w, Tensor(), state), Error);
  EXPECT_THROW(fp8_linear(uniform({4, 32}, 21, 1.0f), w, uniform({8}, 22, 1.0f), state), Error);
  EXPECT_THROW(fp8_linear(uniform({4, 32}, 21, 1.0f), w, Tensor(), nullptr), Error);
  EXPECT_THROW(fp8_linear(uniform({4, 32}, 21, 1.0f), w.reshape({16, 2, 16}), Tensor(), state), Error);
}

}  // namespace
}  // namespace mantissa::amp
