// The CPU's tensor-core accumulator model (ops/fp8/accumulator.h) against the FP8 tensor core itself: a slice
// of the first lent GPU's record (an H200 through cuBLASLt, tests/golden/fp8_accum_h200.h5, made by
// scripts/golden/fp8_accum_h200.py from bench/gpu/2026-11-28), every output bit for bit, with fast
// accumulation off (promotion every 128 products) and on (never). Then the model inside scaled_mm, the f32
// model's difference from it, and what is refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "framework/error.h"
#include "ops/fp8/accumulator.h"
#include "ops/fp8/fp8.h"
#include "tests/support/golden.h"

namespace mantissa {
namespace {

TEST(Fp8Accumulator, MatchesTheH200TensorCoreBitForBit) {
  testing::GoldenFile g("fp8_accum_h200.h5");
  const std::vector<std::string> cases = g.members("/");
  ASSERT_GE(cases.size(), 16u);
  int64_t outputs = 0;
  for (const std::string& name : cases) {
    const std::vector<uint32_t> meta = g.u32("/" + name + "/meta");
    const int64_t m = meta[0], n = meta[1], k = meta[2];
    const DType fa = meta[3] ? DType::kF8E5M2 : DType::kF8E4M3, fb = meta[4] ? DType::kF8E5M2 : DType::kF8E4M3;
    const std::vector<uint8_t> a = g.u8("/" + name + "/a"), bt = g.u8("/" + name + "/bt");
    ASSERT_EQ(static_cast<int64_t>(a.size()), m * k) << name;
    ASSERT_EQ(static_cast<int64_t>(bt.size()), n * k) << name;
    for (const bool fast : {false, true}) {
      const std::vector<uint32_t> want = g.u32("/" + name + (fast ? "/out_fast1" : "/out_fast0"));
      const Fp8Accumulator model = Fp8Accumulator::hopper(fast);
      int64_t bad = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const float got = cpu::tensor_core_dot(&a[i * k], 1, fa, &bt[j * k], 1, fb, k, model);
          const uint32_t w = want[i * n + j];
          if (std::bit_cast<uint32_t>(got) != w && bad++ < 3) {
            ADD_FAILURE() << name << (fast ? " fast" : "") << " (" << i << ", " << j << "): model " << got << ", H200 "
                          << std::bit_cast<float>(w);
          }
          ++outputs;
        }
      }
      EXPECT_EQ(bad, 0) << name << (fast ? " with fast accumulation" : "");
    }
  }
  EXPECT_EQ(outputs, 77824);  // 16 input sets, both modes
}

// The ladder's lesson in two lines: after a product of 2^16, one of 2^3 (2^-13 of it) survives a K step, and
// one of 2^2 does not; the f32 model keeps both.
TEST(Fp8Accumulator, KeepsThirteenBitsBelowTheAnchor) {
  auto bits = [](float v) {
    Tensor t = quantize_fp8(scalar_tensor(v), scalar_tensor(1.0f), DType::kF8E4M3, Fp8Overflow::kSaturate).data;
    return *static_cast<const uint8_t*>(t.data_ptr());
  };
  const uint8_t big = bits(256.0f), eight = bits(8.0f), four = bits(4.0f), one = bits(1.0f);
  const std::vector<uint8_t> a = {big, eight, four}, b = {big, one, one};
  const Fp8Accumulator hopper = Fp8Accumulator::hopper();
  EXPECT_EQ(cpu::tensor_core_dot(a.data(), 1, DType::kF8E4M3, b.data(), 1, DType::kF8E4M3, 2, hopper), 65544.0f);
  const std::vector<uint8_t> a4 = {big, four};
  EXPECT_EQ(cpu::tensor_core_dot(a4.data(), 1, DType::kF8E4M3, b.data(), 1, DType::kF8E4M3, 2, hopper), 65536.0f);
}

TEST(Fp8Accumulator, ScaledMmUsesTheScopedModel) {
  // 1 x 256 times 256 x 1: one 2^16 product, then 255 of 2^2, which the tensor core drops in the first 128 and
  // keeps (as a separate partial sum) in the second; f32 keeps all.
  std::vector<float> av(256, 2.0f), bv(256, 2.0f);
  av[0] = bv[0] = 256.0f;
  const Tensor one = scalar_tensor(1.0f);
  const Tensor a = quantize_fp8(from_vector<float>(av, {1, 256}), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  const Tensor b = quantize_fp8(from_vector<float>(bv, {256, 1}), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  EXPECT_EQ(cpu_fp8_accumulator(), Fp8Accumulator::f32());
  EXPECT_EQ(scaled_mm(a, b, one, one, DType::kF32).item(), 65536.0 + 255 * 4.0);
  {
    Fp8AccumulatorScope scope(Fp8Accumulator::hopper());
    EXPECT_EQ(scaled_mm(a, b, one, one, DType::kF32).item(), 65536.0 + 128 * 4.0);
    Fp8AccumulatorScope fast(Fp8Accumulator::hopper(true));
    EXPECT_EQ(scaled_mm(a, b, one, one, DType::kF32).item(), 65536.0);
  }
  EXPECT_EQ(cpu_fp8_accumulator(), Fp8Accumulator::f32());
}

TEST(Fp8Accumulator, NamesParseAndBadModelsAreRefused) {
  for (const char* name : {"f32", "hopper", "hopper-fast"}) EXPECT_EQ(parse_fp8_accumulator(name).name(), name);
  try {
    parse_fp8_accumulator("h100");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown FP8 accumulator 'h100'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hopper-fast"), std::string::npos) << e.what();
  }
  Fp8Accumulator bad = Fp8Accumulator::hopper();
  bad.promotion_interval = 100;
  EXPECT_THROW(set_cpu_fp8_accumulator(bad), Error);
  bad = Fp8Accumulator::hopper();
  bad.retained_bits = 30;
  EXPECT_THROW(set_cpu_fp8_accumulator(bad), Error);
  EXPECT_EQ(cpu_fp8_accumulator(), Fp8Accumulator::f32());
}

}  // namespace
}  // namespace mantissa
