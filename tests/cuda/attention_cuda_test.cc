// The composed attention (matmul, masked_fill, softmax, matmul) on the GPU against the CPU, causal and
// not, forward and backward. Needs the CUDA GEMM (issue 7's cuBLASLt path) as well as this branch's
// softmax and masked_fill. Skipped without a device. (cuDNN's fused attention is not used.)
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "ops/attention/attention.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::random_tensor;
using testing::within_rel;

TEST(CudaAttention, ComposedPathMatchesCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (AttentionMask mask : {AttentionMask::kNone, AttentionMask::kCausal}) {
    Tensor q = random_tensor({2, 3, 16, 8}, DType::kF32, 501), k = random_tensor({2, 3, 16, 8}, DType::kF32, 502);
    Tensor v = random_tensor({2, 3, 16, 8}, DType::kF32, 503);
    Tensor qd = q.to(cuda(0)), kd = k.to(cuda(0)), vd = v.to(cuda(0));
    for (Tensor* p : {&q, &k, &v, &qd, &kd, &vd}) p->set_requires_grad(true);
    const Tensor y = scaled_dot_product_attention(q, k, v, {.mask = mask});
    const Tensor yd = scaled_dot_product_attention(qd, kd, vd, {.mask = mask});
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
