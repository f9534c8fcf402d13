// The block-scaled ops on CUDA (ops/fp8/blocks.cu; skipped without a GPU): quantize_blocks gives the CPU's bytes,
// scales and counts for every rule, tile shape and element format, stochastic rounding included (the random word
// is a function of the element's index); hadamard16 the CPU's bits; block_scaled_mm the CPU's result within the
// f32 summation-order bound; and fp8_linear under each block-scaled recipe the CPU's gradients within the same.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "amp/fp8_linear.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "ops/fp8/accumulator.h"
#include "ops/fp8/blocks.h"
#include "tests/support/cuda_skip.h"

#ifdef MANTISSA_WITH_CUDA
#include "ops/fp8/fp8_launch.h"
#endif

namespace mantissa {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(kCPU).contiguous(), y = b.to(kCPU).contiguous();
  return x.dtype() == y.dtype() && x.numel() == y.numel() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * element_size(x.dtype())) == 0;
}

TEST(CudaBlocks, QuantizeEqualsTheCpu) {
  MT_SKIP_WITHOUT_CUDA();
  Generator gen(1);
  Tensor x = randn({96, 80}, {}, &gen) * 4.0;
  x.data<float>()[5] = 1e6f;  // a block with an outlier
  for (const BlockQuantOptions& base :
       {BlockQuantOptions{.rule = BlockScaleRule::kF32, .block_cols = 0},
        BlockQuantOptions{.rule = BlockScaleRule::kF32Pow2, .block_rows = 32, .block_cols = 32},
        BlockQuantOptions{.rule = BlockScaleRule::kE8M0, .block_cols = 32},
        BlockQuantOptions{.rule = BlockScaleRule::kE8M0Rceil, .block_cols = 32},
        BlockQuantOptions{.element = BlockElement::kE2M1, .rule = BlockScaleRule::kE8M0Rceil, .block_cols = 32},
        BlockQuantOptions{
            .element = BlockElement::kE5M2, .rule = BlockScaleRule::kE8M0, .block_rows = 32, .block_cols = 1},
        BlockQuantOptions{.element = BlockElement::kE2M1, .rule = BlockScaleRule::kNvfp4, .block_cols = 16},
        BlockQuantOptions{
            .element = BlockElement::kE2M1, .rule = BlockScaleRule::kNvfp4, .block_rows = 16, .block_cols = 16},
        BlockQuantOptions{.element = BlockElement::kE2M1,
        .rule = BlockScaleRule::kE8M0,
        .block_cols = 32,
        .stochastic = true,
        .seed = 3,
        .offset = 9}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " rule " + std::to_string(static_cast<int>(base.rule)) + " tile " +
                   std::to_string(base.block_rows) + "x" + std::to_string(base.block_cols));
      const Tensor xi = x.to(dtype);
      const BlockQuantized cpu = quantize_blocks(xi, base), gpu = quantize_blocks(xi.to(cuda()), base);
      EXPECT_TRUE(same_bytes(cpu.data, gpu.data));
      EXPECT_TRUE(same_bytes(cpu.scale_inv, gpu.scale_inv));
      if (cpu.scale_bits.defined()) {
        EXPECT_TRUE(same_bytes(cpu.scale_bits, gpu.scale_bits));
      }
      if (cpu.tensor_scale_inv.defined()) {
        EXPECT_TRUE(same_bytes(cpu.tensor_scale_inv, gpu.tensor_scale_inv));
      }
      EXPECT_TRUE(same_bytes(cpu.amax, gpu.amax));
      EXPECT_EQ(cpu.overflow.item(), gpu.overflow.item());
      EXPECT_EQ(cpu.underflow.item(), gpu.underflow.item());
    }
  }
}

TEST(CudaBlocks, HadamardEqualsTheCpu) {
  MT_SKIP_WITHOUT_CUDA();
  Generator gen(2);
  const Tensor x = randn({40, 70}, {}, &gen), signs = hadamard16_signs(1);
  EXPECT_TRUE(same_bytes(hadamard16(x, signs), hadamard16(x.to(cuda()), signs.to(cuda()))));
}

// The GPU sums each block's exact products in its own order: within a few f32 roundings of the CPU's sum.
TEST(CudaBlocks, BlockScaledMmMatchesTheCpu) {
  MT_SKIP_WITHOUT_CUDA();
  Generator gen(3);
  const Tensor x = randn({64, 200}, {}, &gen), w = randn({48, 200}, {}, &gen);
  for (const auto& [block, rule] :
       {std::pair{int64_t{128}, BlockScaleRule::kF32}, std::pair{int64_t{32}, BlockScaleRule::kE8M0}}) {
    const BlockQuantized qa = quantize_blocks(x, {.rule = rule, .block_cols = block});
    const BlockQuantized qb = quantize_blocks(w, {.rule = rule, .block_cols = block});
    const Tensor bias = randn({48}, {}, &gen);
    const Tensor cpu = block_scaled_mm(qa.data, qb.data.t(), qa.scale_inv, qb.scale_inv.t(),
                                       {.block_k = block, .bias = bias, .alpha = scalar_tensor(0.5)});
    const Tensor gpu =
        block_scaled_mm(qa.data.to(cuda()), qb.data.to(cuda()).t(), qa.scale_inv.to(cuda()),
                        qb.scale_inv.to(cuda()).t(),
                        {.block_k = block, .bias = bias.to(cuda()), .alpha = scalar_tensor(0.5, {.device = cuda()})})
            .to(kCPU);
    for (int64_t i = 0; i < cpu.numel(); ++i)
      ASSERT_NEAR(gpu.data<float>()[i], cpu.data<float>()[i], 1e-4 * (1 + std::fabs(cpu.data<float>()[i])))
          << "block " << block << " element " << i;
  }
}

// Blackwell's block-scaled tensor cores (cuBLASLt's VEC32_UE8M0 and VEC16_UE4M3 modes): MXFP8 and NVFP4 operands,
// scales per column and NVFP4's 16x16 weight blocks, alpha and a bias, against the CPU within 2e-3 relative: a
// wrong scale layout or nibble order is off by the order of the values, while how many bits Blackwell's block MMA
// keeps in its sums is not known here (Hopper's FP8 MMA keeps about 14: ops/fp8/accumulator.h), so the bound
// leaves room for it. The scaled_mm statistics show the tensor-core path ran rather than the f32 one. Skipped
// before compute capability 10.0. Written for the first lent Blackwell GPU: it has never run.
TEST(CudaBlocks, BlackwellBlockGemmMatchesTheCpu) {
  MT_SKIP_WITHOUT_CUDA();
#ifdef MANTISSA_WITH_CUDA
  if (gpu::compute_capability(0) < 100) GTEST_SKIP() << "needs a Blackwell GPU (compute capability 10.0 or later)";
  Generator gen(5);
  const Tensor x = randn({64, 256}, {}, &gen), w = randn({48, 256}, {}, &gen), bias = randn({48}, {}, &gen);
  struct Case {
    const char* name;
    BlockQuantOptions o;
    bool square;
  };
  const Case cases[] = {
      {"mxfp8", {.rule = BlockScaleRule::kE8M0, .block_cols = 32}, false},
      {"nvfp4", {.element = BlockElement::kE2M1, .rule = BlockScaleRule::kNvfp4, .block_cols = 16}, false},
      {"nvfp4 16x16 weights",
       {.element = BlockElement::kE2M1, .rule = BlockScaleRule::kNvfp4, .block_rows = 16, .block_cols = 16},
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    BlockQuantOptions ow = c.o;
    if (!c.square) ow.block_rows = 1;
    BlockQuantOptions oa = c.o;
    oa.block_rows = 1;
    const BlockQuantized qa = quantize_blocks(x, oa), qb = quantize_blocks(w, ow);
    const bool e2m1 = c.o.element == BlockElement::kE2M1;
    const Tensor alpha = e2m1 ? mul(qa.tensor_scale_inv, qb.tensor_scale_inv) : scalar_tensor(0.5);
    const BlockScaledMmOptions o{.block_k = c.o.block_cols, .bias = bias, .alpha = alpha, .e2m1 = e2m1};
    const Tensor cpu = block_scaled_mm(qa.data, qb.data.t(), qa.scale_inv, qb.scale_inv.t(), o);
    const gpu::ScaledMmStats before = gpu::scaled_mm_stats();
    BlockScaledMmOptions od = o;
    od.bias = bias.to(cuda());
    od.alpha = alpha.to(cuda());
    const Tensor gpu_out = block_scaled_mm(qa.data.to(cuda()), qb.data.to(cuda()).t(), qa.scale_inv.to(cuda()),
                                           qb.scale_inv.to(cuda()).t(), od)
                               .to(kCPU);
    EXPECT_EQ(gpu::scaled_mm_stats().fp8_gemms, before.fp8_gemms + 1) << "the f32 path ran, not the tensor core";
    for (int64_t i = 0; i < cpu.numel(); ++i)
      ASSERT_NEAR(gpu_out.data<float>()[i], cpu.data<float>()[i], 2e-3 * (1 + std::fabs(cpu.data<float>()[i])))
          << "element " << i;
  }
#endif
}

// On an H200 the rowwise and blockwise recipes' GEMMs run on the FP8 tensor core, whose sums keep fewer bits than
// f32: the CPU then sums with its model of that accumulator (ops/fp8/accumulator.h), as --fp8_accumulator=hopper
// does. With the f32 model the rowwise dW was 2.8e-3 off (run 3). MX and NVFP4 blocks run the f32 path on both.
TEST(CudaBlocks, LinearUnderEveryBlockRecipeMatchesTheCpu) {
  MT_SKIP_WITHOUT_CUDA();
  bool hopper = false;
#ifdef MANTISSA_WITH_CUDA
  hopper = gpu::compute_capability(0) == 90;
#endif
  Generator gen(4);
  const Tensor x0 = randn({64, 128}, {}, &gen), w0 = randn({32, 128}, {}, &gen) * 0.1, g = randn({64, 32}, {}, &gen);
  for (const amp::Fp8Recipe& r : {amp::Fp8Recipe::rowwise(), amp::Fp8Recipe::blockwise(), amp::Fp8Recipe::mxfp8(),
                                  amp::Fp8Recipe::nvfp4(), amp::Fp8Recipe::mxfp4()}) {
    SCOPED_TRACE(r.str());
    const bool tensor_core =
        hopper && (r.str() == amp::Fp8Recipe::rowwise().str() || r.str() == amp::Fp8Recipe::blockwise().str());
    const Fp8AccumulatorScope model(tensor_core ? Fp8Accumulator::hopper() : cpu_fp8_accumulator());
    std::vector<Tensor> dw;
    for (Device d : {kCPU, cuda()}) {
      Tensor x = x0.to(d).detach().set_requires_grad(true), w = w0.to(d).detach().set_requires_grad(true);
      amp::fp8_linear(x, w, Tensor(), amp::Fp8LinearState::make("w", r, d, 7)).backward(g.to(d));
      dw.push_back(w.grad().to(kCPU));
    }
    for (int64_t i = 0; i < dw[0].numel(); ++i)
      ASSERT_NEAR(dw[1].data<float>()[i], dw[0].data<float>()[i], 1e-3 * (1 + std::fabs(dw[0].data<float>()[i])));
  }
}

}  // namespace
}  // namespace mantissa
