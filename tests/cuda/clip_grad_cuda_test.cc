// clip_grad_norm_ / enqueue_clip_grad_norm_ / clip_grad_value_ on GPU grads against the CPU (skipped without a
// GPU). Both devices add the squares in optim/norm_order.h's order, so totals and scaled grads are compared
// bit for bit, not to a tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/cuda/device.h"
#include "framework/random.h"
#include "ops/elementwise/elementwise.h"
#include "optim/clip_grad.h"
#include "optim/multi_tensor.h"
#include "optim/norm_order.h"
#include "tests/support/cuda_skip.h"

namespace mantissa {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Parameters with the given grads, copied to `device` (the CPU copy stays independent of the source).
std::vector<Tensor> params_with(const std::vector<Tensor>& grads, Device device) {
  std::vector<Tensor> out;
  for (const auto& g : grads) {
    Tensor p = zeros({g.numel()}, {.dtype = g.dtype()}).to(device);
    p.set_requires_grad(true);
    p.set_grad(device.is_cpu() ? g.clone() : g.to(device));
    out.push_back(p);
  }
  return out;
}

// Grads of sizes around the norm block (16 K), the lane block (2 K) and the multi-tensor chunk (64 K), f32 and
// f64 mixed, wide in magnitude, and more of them than one launch's tensor list holds.
std::vector<Tensor> odd_grads(uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> sizes = {1,
                                3,
                                2047,
                                2049,
                                norm_order::kBlock - 1,
                                norm_order::kBlock + 1,
                                multi_tensor::kChunkSize - 1,
                                multi_tensor::kChunkSize,
                                multi_tensor::kChunkSize + 1,
                                3 * multi_tensor::kChunkSize + 4097};
  for (int i = 0; i < 2 * multi_tensor::max_tensors(2); ++i) sizes.push_back(1 + 37 * i);
  std::vector<Tensor> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const DType dtype = i % 3 == 2 ? DType::kF64 : DType::kF32;
    // randn times a per-grad power of two in 2^-12 .. 2^12: the sum's low bits depend on the order.
    out.push_back(randn({sizes[i]}, {.dtype = dtype}, &gen) * std::ldexp(1.0, static_cast<int>(i % 25) - 12));
  }
  return out;
}

bool same_bits(const Tensor& cpu, const Tensor& gpu) {
  const Tensor g = gpu.to(kCPU);
  return cpu.dtype() == g.dtype() && cpu.numel() == g.numel() &&
         std::memcmp(cpu.data_ptr(), g.data_ptr(), cpu.nbytes()) == 0;
}

// Clips the same grads on both devices and expects the same total and the same grads, bit for bit.
void expect_same_clip(const std::vector<Tensor>& grads, double max_norm, NormType type) {
  auto cpu = params_with(grads, kCPU), gpu = params_with(grads, cuda(0));
  const double tc = clip_grad_norm_(cpu, max_norm, type), tg = clip_grad_norm_(gpu, max_norm, type);
  if (std::isnan(tc)) {
    EXPECT_TRUE(std::isnan(tg));
  } else {
    EXPECT_EQ(tg, tc);
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_TRUE(same_bits(cpu[i].grad(), gpu[i].grad())) << "grad " << i << " of " << cpu[i].numel();
  }
}

class ClipGradCuda : public ::testing::Test {
 protected:
  void SetUp() override { MT_SKIP_WITHOUT_CUDA(); }
};

TEST_F(ClipGradCuda, NormsAndScaledGradsMatchTheCpuBitForBit) {
  const auto grads = odd_grads(3);
  for (NormType type : {NormType::kL2, NormType::kInf}) {
    for (double max_norm : {1.0, 1e30, kInf}) {
      SCOPED_TRACE(testing::Message() << "max_norm " << max_norm << (type == NormType::kL2 ? " L2" : " inf"));
      expect_same_clip(grads, max_norm, type);
    }
  }
}

TEST_F(ClipGradCuda, ALaunchBoundaryInsideOneGrad) {
  // More chunks than one launch's 320 blocks: the grad continues in the next launch, its partials follow on.
  Generator gen(5);
  const std::vector<Tensor> grads = {randn({7}, {}, &gen),
                                     randn({multi_tensor::kMaxBlocks * multi_tensor::kChunkSize + 12345}, {}, &gen)};
  expect_same_clip(grads, 1.0, NormType::kL2);
  expect_same_clip(grads, 1.0, NormType::kInf);
}

TEST_F(ClipGradCuda, F32OverflowingSumsAreClipped) {
  // 1e20 squared is past f32's range: a sum of squares in f32 would be inf and skip the clipping.
  const std::vector<Tensor> grads = {full({1000}, 1e20), full({3}, -1e20)};
  auto gpu = params_with(grads, cuda(0));
  const double total = clip_grad_norm_(gpu, 1.0);
  EXPECT_TRUE(std::isfinite(total));
  EXPECT_NEAR(total, std::sqrt(1003.0) * double(1e20f), 1e-12 * total);
  EXPECT_LT(std::abs(gpu[0].grad().to(kCPU).data<float>()[0]), 1.0f);  // clipped
  expect_same_clip(grads, 1.0, NormType::kL2);
}

TEST_F(ClipGradCuda, NonFiniteGradsAreLeftAlone) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, nan}) {
    auto grads = odd_grads(4);
    grads[9].data<float>()[70000] = bad;  // f32, in the grad's second chunk
    for (NormType type : {NormType::kL2, NormType::kInf}) {
      auto gpu = params_with(grads, cuda(0));
      const double total = clip_grad_norm_(gpu, 1.0, type);
      EXPECT_FALSE(std::isfinite(total));
      if (std::isnan(bad)) {
        EXPECT_TRUE(std::isnan(total));
      }
      for (size_t i = 0; i < grads.size(); ++i) ASSERT_TRUE(same_bits(grads[i], gpu[i].grad())) << i;  // untouched
      expect_same_clip(grads, 1.0, type);
    }
  }
}

TEST_F(ClipGradCuda, EnqueueReturnsTheTotalOnTheDevice) {
  const auto grads = odd_grads(6);
  auto a = params_with(grads, cuda(0)), b = params_with(grads, cuda(0));
  const Tensor total = enqueue_clip_grad_norm_(a, 0.25);
  EXPECT_EQ(total.dtype(), DType::kF64);
  EXPECT_EQ(total.dim(), 0);
  EXPECT_EQ(total.device(), cuda(0));
  EXPECT_EQ(total.item(), clip_grad_norm_(b, 0.25));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same_bits(a[i].grad().to(kCPU), b[i].grad())) << i;
}

TEST_F(ClipGradCuda, ValueClipClamps) {
  auto gpu = params_with(odd_grads(7), cuda(0));
  clip_grad_value_(gpu, 0.5);
  for (const auto& p : gpu) {
    const Tensor c = p.grad().to(DType::kF64).to(kCPU);
    for (int64_t j = 0; j < c.numel(); ++j) ASSERT_LE(std::abs(c.data<double>()[j]), 0.5);
  }
}

}  // namespace
}  // namespace mantissa
