// The CPU's tensor-core accumulator model (ops/fp8/accumulator.h) against the FP8 tensor core itself: a slice
// of the first lent GPU's record (an H200 through cuBLASLt, tests/golden/fp8_accum_h200.h5, made by
// scripts/golden/fp8_accum_h200.py from bench/gpu/2026-11-28), every output bit for bit, with fast
// accumulation off (promotion every 128 products) and on (never). Then the model inside scaled_mm, the f32
// model's difference from it, and what is refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
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
  ASSERT_GE(cases.size(), 17u);
  int64_t outputs = 0;
  for (const std::string& name : cases) {
    if (name == "scaled") continue;  // the next test's
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

Tensor from_bits(const std::vector<uint8_t>& bytes, Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), {.dtype = dtype});
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}
Tensor f32_from_bits(const std::vector<uint32_t>& bits, Shape shape) {
  Tensor t = empty(std::move(shape));
  std::memcpy(t.data_ptr(), bits.data(), bits.size() * sizeof(uint32_t));
  return t;
}

// scaled_mm on the CPU with the tensor-core model against the H200's scaled GEMMs (bf16 outputs): per-row
// scales (torchao's rowwise), and DeepSeek-V3's 1x128 x 128x128 and 1x128 x 1x128 block scales, which
// cuBLASLt applies to each 128-wide block's sum; the scales as torch._scaled_mm took them.
TEST(Fp8Accumulator, ScaledMmMatchesTheH200WithRowAndBlockScales) {
  testing::GoldenFile g("fp8_accum_h200.h5");
  const std::vector<std::string> cases = g.members("/scaled");
  ASSERT_GE(cases.size(), 10u);
  for (const std::string& name : cases) {
    const std::string at = "/scaled/" + name;
    const std::vector<uint32_t> meta = g.u32(at + "/meta");
    const int64_t m = meta[0], n = meta[1], k = meta[2];
    const Tensor a = from_bits(g.u8(at + "/a"), {m, k}, DType::kF8E4M3);
    const Tensor b = from_bits(g.u8(at + "/bt"), {n, k}, DType::kF8E4M3).t();  // [k, n], column-major
    const Tensor sa = f32_from_bits(g.u32(at + "/scale_a"), g.shape(at + "/scale_a"));
    const Tensor sb = f32_from_bits(g.u32(at + "/scale_b"), g.shape(at + "/scale_b"));
    const std::vector<uint32_t> want = g.u32(at + "/out");
    Fp8AccumulatorScope scope(Fp8Accumulator::hopper(meta[3] != 0));
    const Tensor out = scaled_mm(a, b, sa, sb, DType::kBF16).to(DType::kF32).contiguous();
    int64_t bad = 0;
    for (int64_t i = 0; i < m * n; ++i) {
      const uint32_t got = std::bit_cast<uint32_t>(out.data<float>()[i]);
      if (got != want[static_cast<size_t>(i)] && bad++ < 3) {
        ADD_FAILURE() << name << " element " << i << ": " << out.data<float>()[i] << ", H200 "
                      << std::bit_cast<float>(want[static_cast<size_t>(i)]);
      }
    }
    EXPECT_EQ(bad, 0) << name;
  }
}

// Block scales with the f32 model: each block's exact sum (small integers here) times its scales.
TEST(Fp8Accumulator, BlockScalesWeighEachBlockOfK) {
  const Tensor one = scalar_tensor(1.0f);
  const Tensor a = quantize_fp8(full({2, 256}, 1.0f), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  const Tensor b = quantize_fp8(full({256, 3}, 2.0f), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  const Tensor sa = from_vector<float>({1.0f, 0.5f, 2.0f, 4.0f}, {2, 2});  // [m, K/128]
  const Tensor sb = from_vector<float>({1.0f, 3.0f}, {2, 1});              // [K/128, ceil(n/128)]
  const Tensor out = scaled_mm(a, b, sa, sb, DType::kF32);
  // Row 0: 256 * 1 + 256 * 0.5 * 3 = 640; row 1: 256 * 2 + 256 * 4 * 3 = 3584.
  EXPECT_EQ(out.to(DType::kF64).contiguous().data<double>()[0], 640.0);
  EXPECT_EQ(out.to(DType::kF64).contiguous().data<double>()[3], 3584.0);
  // Rowwise: row and column factors.
  const Tensor r = scaled_mm(a, b, from_vector<float>({2.0f, 3.0f}, {2, 1}),
                             from_vector<float>({1.0f, 0.5f, 4.0f}, {1, 3}), DType::kF32);
  EXPECT_EQ(r.to(DType::kF64).contiguous().data<double>()[5], 512.0 * 3.0 * 4.0);
}

TEST(Fp8Accumulator, ScaleShapesThatFitNoRecipeAreRefused) {
  const Tensor one = scalar_tensor(1.0f);
  const Tensor a = quantize_fp8(full({4, 200}, 1.0f), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  const Tensor b = quantize_fp8(full({200, 8}, 1.0f), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
  auto error_of = [&](const Tensor& sa, const Tensor& sb) {
    try {
      scaled_mm(a, b, sa, sb, DType::kF32);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // K = 200 is not a multiple of 128: no block scales.
  EXPECT_NE(error_of(full({4, 2}, 1.0f), full({2, 1}, 1.0f)).find("block scales need K a multiple of 128"),
            std::string::npos);
  const std::string wrong = error_of(full({3}, 1.0f), full({8}, 1.0f));
  EXPECT_NE(wrong.find("fit no scaling for a [4, 200] by [200, 8] product"), std::string::npos) << wrong;
  EXPECT_NE(error_of(full({4}, 1.0f).to(DType::kF64), full({8}, 1.0f)).find("expected scale_inv_a in f32"),
            std::string::npos);
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

// tensor_core_gemm runs the model as f32 vectors, a row of outputs at a time; tensor_core_dot is the integer
// reference it must equal bit for bit: random bytes of both formats (zeros, subnormals, the largest values, and an
// inf or nan in one row and one column), lengths that end mid-group and mid-interval, every model whose sums fit an
// f32, and one that does not (the integer path).
TEST(Fp8Accumulator, TheVectorGemmIsTheDotProductBitForBit) {
  std::mt19937 gen(17);
  std::uniform_int_distribution<int> byte(0, 255);
  const int64_t m = 9, n = 70;
  Fp8Accumulator wide = Fp8Accumulator::hopper();
  wide.retained_bits = 22;  // 22 + 2 + 6 bits: the integer path
  Fp8Accumulator odd = Fp8Accumulator::hopper();
  odd.group = 16;
  odd.retained_bits = 10;
  odd.promotion_interval = 48;
  for (const Fp8Accumulator& model : {Fp8Accumulator::hopper(), Fp8Accumulator::hopper(true), odd, wide}) {
    for (const int64_t k : {int64_t{1}, int64_t{45}, int64_t{300}}) {
      for (const auto& [fa, fb] :
           {std::pair{DType::kF8E4M3, DType::kF8E4M3}, std::pair{DType::kF8E5M2, DType::kF8E4M3}}) {
        SCOPED_TRACE(model.name() + " k " + std::to_string(k) + " " + std::string(dtype_name(fa)));
        std::vector<uint8_t> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
        for (uint8_t& v : a) v = static_cast<uint8_t>(byte(gen) % 4 == 0 ? 0 : byte(gen));
        for (uint8_t& v : b) v = static_cast<uint8_t>(byte(gen) % 4 == 0 ? 0 : byte(gen));
        const auto clean = [](std::vector<uint8_t>& x, DType t) {  // no inf or nan but where placed below
          for (uint8_t& v : x)
            if (t == DType::kF8E4M3 ? (v & 0x7F) == 0x7F : (v & 0x7C) == 0x7C) v = static_cast<uint8_t>(v & 0xF3);
        };
        clean(a, fa);
        clean(b, fb);
        if (k > 1) {
          a[2 * k + 1] = fa == DType::kF8E4M3 ? 0x7F : 0x7C;  // row 2: nan (E4M3) or inf (E5M2)
          b[3 * n + 5] = 0xFF;                                // column 5: a nan
        }
        std::vector<float> c(static_cast<size_t>(m * n));
        cpu::tensor_core_gemm(a.data(), k, 1, fa, b.data(), n, 1, fb, m, n, k, model, c.data());
        int64_t bad = 0;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const float want = cpu::tensor_core_dot(&a[i * k], 1, fa, &b[j], n, fb, k, model);
            const float got = c[i * n + j];
            if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && !(std::isnan(got) && std::isnan(want)))
              if (bad++ < 3) ADD_FAILURE() << "C(" << i << ", " << j << ") = " << got << ", the dot product " << want;
          }
        EXPECT_EQ(bad, 0);
      }
    }
  }
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
