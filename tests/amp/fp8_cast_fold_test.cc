// fp8_cast (amp/fp8_linear.h), which has quantize_fp8 fold the scaling state's bookkeeping into the cast
// (ops/fp8/fp8.h, Fp8CastOptions), against the composed ops it replaced (amax, fp8_dynamic_scale,
// fp8_reciprocal, quantize_fp8, fp8_record): the same FP8 bytes, scale and scale_inv bits, amax history bits and
// overflow counter, cast after cast, for delayed and dynamic scaling, both formats, margins 0 and 3, on inputs
// with nans, infinities, values past the saturation boundary, zeros only and no elements, and from history
// entries that hold nan, -0, a negative or a large value (a loaded checkpoint may hold anything).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "amp/fp8_linear.h"
#include "amp/fp8_scaling.h"
#include "framework/error.h"
#include "ops/fp8/fp8.h"

namespace mantissa::amp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// The cast as fp8_cast made it before the fold (with recording): the reference.
Fp8Cast composed_cast(Fp8TensorState& s, const Tensor& x) {
  Tensor scale = s.scale, scale_inv = s.scale_inv;
  if (s.scaling.scaling == Fp8Scaling::kDynamic) {
    scale = fp8_dynamic_scale(amax(x), s.dtype, s.scaling.margin);
    scale_inv = fp8_reciprocal(scale);
  }
  Fp8Quantized q = quantize_fp8(x, scale, s.dtype, s.overflow);
  fp8_record(s, q.amax, q.overflow);
  if (s.scaling.scaling == Fp8Scaling::kDynamic) {
    s.scale = scale;
    s.scale_inv = scale_inv;
  }
  return {std::move(q.data), std::move(scale_inv)};
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint32_t> out(static_cast<size_t>(c.numel()));
  if (c.dtype() == DType::kF64) {
    for (size_t i = 0; i < out.size(); ++i) {
      const double d = c.data<double>()[i];
      out[i] = static_cast<uint32_t>(std::bit_cast<uint64_t>(d) ^ (std::bit_cast<uint64_t>(d) >> 32));
    }
  } else if (c.numel() > 0) {
    std::memcpy(out.data(), c.data_ptr(), out.size() * sizeof(uint32_t));
  }
  return out;
}
std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return std::vector<uint8_t>(p, p + t.numel());
}

void expect_same_state(const Fp8TensorState& a, const Fp8TensorState& b) {
  EXPECT_EQ(bits_of(a.amax_history), bits_of(b.amax_history));
  EXPECT_EQ(bits_of(a.scale), bits_of(b.scale));
  EXPECT_EQ(bits_of(a.scale_inv), bits_of(b.scale_inv));
  EXPECT_EQ(bits_of(a.overflow_count), bits_of(b.overflow_count));
  EXPECT_EQ(a.slot, b.slot);
}

Tensor f32s(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector<float>(v, {n});
}

TEST(Fp8CastFold, EqualsTheComposedOpsCastAfterCast) {
  const std::vector<Tensor> inputs = {
      f32s({1.0f, -2.5f, 3.0f, 0.0f}),
      f32s({448.0f, 464.0f, std::nextafter(464.0f, kInf), 61440.0f, -1e6f, 1e-30f}),
      f32s({kInf, -1.0f, 2.0f}),
      f32s({1.0f, kNan, 3.0f}),
      f32s({0.0f, -0.0f}),  // amax 0: the dynamic scale's clamp
      f32s({}),
      f32s({std::ldexp(1.0f, -20), -std::ldexp(1.5f, -18)}),
  };
  const std::vector<std::vector<float>> histories = {
      {0.0f, 0.0f, 0.0f}, {kNan, 1.0f, 2.0f}, {-0.0f, 5.0f, 0.0f}, {-3.0f, 0.0f, 1.0f}, {1e30f, 0.0f, 0.0f}};
  for (Fp8Scaling scaling : {Fp8Scaling::kDelayed, Fp8Scaling::kDynamic}) {
    for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
      for (int64_t margin : {0, 3}) {
        for (const std::vector<float>& h : histories) {
          SCOPED_TRACE(testing::Message() << (scaling == Fp8Scaling::kDelayed ? "delayed" : "dynamic") << " "
                                          << dtype_name(fp8) << " margin " << margin << " history[0] " << h[0]);
          const Fp8TensorScaling sc{.scaling = scaling, .history_len = 3, .margin = margin};
          Fp8TensorState ref = Fp8TensorState::make(sc, fp8, Fp8Overflow::kSaturate, kCPU);
          Fp8TensorState got = Fp8TensorState::make(sc, fp8, Fp8Overflow::kSaturate, kCPU);
          if (scaling == Fp8Scaling::kDelayed) {
            for (Fp8TensorState* s : {&ref, &got}) {
              s->amax_history = f32s(h);
              s->scale = scalar_tensor(7.5, {.dtype = DType::kF32});
              s->scale_inv = fp8_reciprocal(s->scale);
            }
          }
          for (size_t i = 0; i < inputs.size(); ++i) {
            SCOPED_TRACE(testing::Message() << "input " << i);
            const Fp8Cast want = composed_cast(ref, inputs[i]);
            const Fp8Cast have = fp8_cast(got, inputs[i], Fp8StateUpdate::kRecord);
            EXPECT_EQ(bytes_of(have.data), bytes_of(want.data));
            EXPECT_EQ(bits_of(have.scale_inv), bits_of(want.scale_inv));
            expect_same_state(got, ref);
          }
          // The end of the step reads what the casts recorded: the next scales agree as well.
          fp8_end_step(ref);
          fp8_end_step(got);
          expect_same_state(got, ref);
        }
      }
    }
  }
}

TEST(Fp8CastFold, LeaveRecordsNothingAndCastsAsRecordDoes) {
  for (Fp8Scaling scaling : {Fp8Scaling::kDelayed, Fp8Scaling::kDynamic}) {
    Fp8TensorState s = Fp8TensorState::make({.scaling = scaling}, DType::kF8E4M3, Fp8Overflow::kSaturate, kCPU);
    const std::vector<uint32_t> history = bits_of(s.amax_history), count = bits_of(s.overflow_count);
    const Tensor scale_before = s.scale;
    const Tensor x = f32s({1e6f, 2.0f, -3.0f});
    const Fp8Cast left = fp8_cast(s, x, Fp8StateUpdate::kLeave);
    EXPECT_EQ(bits_of(s.amax_history), history);
    EXPECT_EQ(bits_of(s.overflow_count), count);
    EXPECT_TRUE(s.scale.is_same(scale_before));
    const Fp8Cast recorded = fp8_cast(s, x, Fp8StateUpdate::kRecord);
    EXPECT_EQ(bytes_of(left.data), bytes_of(recorded.data));
    EXPECT_EQ(bits_of(left.scale_inv), bits_of(recorded.scale_inv));
    EXPECT_EQ(s.overflow_count.item<double>(), scaling == Fp8Scaling::kDelayed ? 1.0 : 0.0);
  }
}

TEST(Fp8CastFold, ArgumentsAreChecked) {
  const Tensor x = f32s({1.0f});
  EXPECT_THROW(quantize_fp8(x, {.fp8 = DType::kF32}), Error);
  EXPECT_THROW(quantize_fp8(x, {.margin = 65}), Error);
  EXPECT_THROW(quantize_fp8(x, {.amax_into = zeros({1})}), Error);
  EXPECT_THROW(quantize_fp8(x, {.overflow_into = zeros({}, {.dtype = DType::kF32})}), Error);
  EXPECT_THROW(quantize_fp8(x, {.scale = zeros({2})}), Error);
}

}  // namespace
}  // namespace mantissa::amp
