// Attention on the GPU against the CPU: the fused op (ops/attention/attention.cu, a warp per row) and the
// composed math path, causal and not, forward and backward, f32 and bf16, and dropout, whose mask both
// devices are written to draw from the same generator words. Skipped without a device. (cuDNN's fused attention is not
// used.)
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "ops/attention/attention.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::random_tensor;
using testing::within_rel;

TEST(CudaAttention, FusedMatchesCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (AttentionMask mask : {AttentionMask::kNone, AttentionMask::kCausal}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (double p : {0.0, 0.25}) {
        // 70 queries, 150 keys: across the CPU's tiles; D 24 and Dv 40 leave lanes idle on the GPU.
        Tensor q = random_tensor({2, 3, 70, 24}, dtype, 511), k = random_tensor({2, 3, 150, 24}, dtype, 512);
        Tensor v = random_tensor({2, 3, 150, 40}, dtype, 513);
        Tensor qd = q.to(cuda(0)), kd = k.to(cuda(0)), vd = v.to(cuda(0));
        for (Tensor* t : {&q, &k, &v, &qd, &kd, &vd}) t->set_requires_grad(true);
        Generator cpu_gen(77), gpu_gen(77);
        const Tensor y = scaled_dot_product_attention(q, k, v, {.mask = mask, .dropout_p = p, .generator = &cpu_gen});
        const Tensor yd =
            scaled_dot_product_attention(qd, kd, vd, {.mask = mask, .dropout_p = p, .generator = &gpu_gen});
        EXPECT_EQ(cpu_gen.state(), gpu_gen.state());
        // f32: dot products of 24-150 terms in another order; bf16: the same, plus P and dS rounded to bf16
        // where a different f32 sum lands them on another side of a rounding boundary.
        const double rtol = dtype == DType::kF32 ? 1e-5 : 2e-2, atol = dtype == DType::kF32 ? 1e-6 : 1e-2;
        EXPECT_TRUE(within_rel(y, yd, rtol, atol));
        const Tensor g = random_tensor(y.shape(), dtype, 514);
        y.backward(g);
        yd.backward(g.to(cuda(0)));
        EXPECT_TRUE(within_rel(q.grad(), qd.grad(), 10 * rtol, 10 * atol));
        EXPECT_TRUE(within_rel(k.grad(), kd.grad(), 10 * rtol, 10 * atol));
        EXPECT_TRUE(within_rel(v.grad(), vd.grad(), 10 * rtol, 10 * atol));
      }
    }
  }
}

TEST(CudaAttention, ComposedPathMatchesCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (AttentionMask mask : {AttentionMask::kNone, AttentionMask::kCausal}) {
    Tensor q = random_tensor({2, 3, 16, 8}, DType::kF32, 501), k = random_tensor({2, 3, 16, 8}, DType::kF32, 502);
    Tensor v = random_tensor({2, 3, 16, 8}, DType::kF32, 503);
    Tensor qd = q.to(cuda(0)), kd = k.to(cuda(0)), vd = v.to(cuda(0));
    for (Tensor* p : {&q, &k, &v, &qd, &kd, &vd}) p->set_requires_grad(true);
    const Tensor y = scaled_dot_product_attention_math(q, k, v, {.mask = mask});
    const Tensor yd = scaled_dot_product_attention_math(qd, kd, vd, {.mask = mask});
    // Exact-f32 GEMMs with 8- or 16-term dot products and a softmax in different orders: 1e-5.
    EXPECT_TRUE(within_rel(y, yd, 1e-5, 1e-6));
    const Tensor g = random_tensor({2, 3, 16, 8}, DType::kF32, 504);
    y.backward(g);
    yd.backward(g.to(cuda(0)));
    EXPECT_TRUE(within_rel(q.grad(), qd.grad(), 1e-4, 1e-5));
    EXPECT_TRUE(within_rel(k.grad(), kd.grad(), 1e-4, 1e-5));
    EXPECT_TRUE(within_rel(v.grad(), vd.grad(), 1e-4, 1e-5));
  }
}

}  // namespace
}  // namespace mantissa
