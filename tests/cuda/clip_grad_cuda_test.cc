// clip_grad_norm_ / clip_grad_value_ on GPU grads against the CPU (skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "framework/cuda/device.h"
#include "framework/random.h"
#include "ops/elementwise.h"
#include "optim/clip_grad.h"

namespace mantissa {
namespace {

std::vector<Tensor> params_with_grads(Device device, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> out;
  for (int64_t n : {7, 1000, 65537}) {
    Tensor p = zeros({n}).to(device);
    p.set_requires_grad(true);
    p.set_grad((randn({n}, {}, &gen) * 3.0).to(device));
    out.push_back(p);
  }
  return out;
}

class ClipGradCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

TEST_F(ClipGradCuda, NormsAndScaledGradsMatchTheCpu) {
  for (NormType type : {NormType::kL2, NormType::kInf}) {
    auto cpu = params_with_grads(kCPU, 3), gpu = params_with_grads(cuda(0), 3);
    const double tc = clip_grad_norm_(cpu, 1.0, type), tg = clip_grad_norm_(gpu, 1.0, type);
    // The GPU sums each grad's squares in f32 (the CPU in f64): ~1e-7 relative on 66k terms, well inside 1e-5.
    EXPECT_NEAR(tg, tc, 1e-5 * tc);
    for (size_t i = 0; i < cpu.size(); ++i) {
      const Tensor a = cpu[i].grad(), b = gpu[i].grad().to(kCPU);
      for (int64_t j = 0; j < a.numel(); ++j) {
        ASSERT_NEAR(b.data<float>()[j], a.data<float>()[j], 1e-5 * std::abs(a.data<float>()[j]) + 1e-12) << j;
      }
    }
  }
}

TEST_F(ClipGradCuda, NonFiniteLeavesGradsAndValueClipClamps) {
  auto gpu = params_with_grads(cuda(0), 4);
  Tensor g1 = gpu[1].grad().to(kCPU);
  g1.data<float>()[5] = std::numeric_limits<float>::infinity();
  gpu[1].set_grad(g1.to(cuda(0)));
  EXPECT_FALSE(std::isfinite(clip_grad_norm_(gpu, 1.0)));
  EXPECT_EQ(gpu[1].grad().to(kCPU).data<float>()[6], g1.data<float>()[6]);  // untouched
  clip_grad_value_(gpu, 0.5);
  const Tensor c = gpu[2].grad().to(kCPU);
  for (int64_t j = 0; j < c.numel(); ++j) ASSERT_LE(std::abs(c.data<float>()[j]), 0.5f);
}

}  // namespace
}  // namespace mantissa
