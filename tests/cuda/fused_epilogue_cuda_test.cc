// linear_act and add_layer_norm on the GPU against the CPU. On CUDA tensors both are written to run the ops
// they fuse (linear with cuBLASLt's bias epilogue, then the activation; add, then layer_norm), so these
// check the composition and its gradients. Skipped without a device.
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/reduce/reduce.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::random_tensor;
using testing::within_rel;

TEST(CudaFusedEpilogue, LinearActMatchesCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Tensor x = random_tensor({3, 50, 40}, dtype, 601), w = random_tensor({72, 40}, dtype, 602);
      Tensor b = random_tensor({72}, dtype, 603);
      Tensor xd = x.to(cuda(0)), wd = w.to(cuda(0)), bd = b.to(cuda(0));
      for (Tensor* t : {&x, &w, &b, &xd, &wd, &bd}) t->set_requires_grad(true);
      const Tensor y = linear_act(x, w, b, act), yd = linear_act(xd, wd, bd, act);
      // f32: 40-term dot products in another order (cuBLAS may use TF32 only when asked: not here), so the
      // error scales with the sum of |terms| (about 10 here), not with the output: the H200 of 2026-11-28
      // was 1.4e-6 off on an output of 0.0115 (bench/gpu/2026-11-28), about 2 f32 ulps of that sum;
      // bf16: the same landing on another side of a bf16 rounding boundary.
      const double rtol = dtype == DType::kF32 ? 1e-5 : 2e-2, atol = dtype == DType::kF32 ? 1e-5 : 1e-2;
      EXPECT_TRUE(within_rel(y, yd, rtol, atol)) << activation_name(act);
      const Tensor g = random_tensor(y.shape(), dtype, 604);
      y.backward(g);
      yd.backward(g.to(cuda(0)));
      EXPECT_TRUE(within_rel(x.grad(), xd.grad(), 10 * rtol, 10 * atol)) << activation_name(act);
      EXPECT_TRUE(within_rel(w.grad(), wd.grad(), 10 * rtol, 10 * atol)) << activation_name(act);
      EXPECT_TRUE(within_rel(b.grad(), bd.grad(), 10 * rtol, 10 * atol)) << activation_name(act);
    }
  }
}

TEST(CudaFusedEpilogue, AddLayerNormMatchesCpu) {
  MT_SKIP_WITHOUT_CUDA();
  Tensor x = random_tensor({4, 9, 64}, DType::kF32, 611), delta = random_tensor({4, 9, 64}, DType::kBF16, 612);
  Tensor w = random_tensor({64}, DType::kF32, 613), b = random_tensor({64}, DType::kF32, 614);
  Tensor xd = x.to(cuda(0)), deltad = delta.to(cuda(0)), wd = w.to(cuda(0)), bd = b.to(cuda(0));
  for (Tensor* t : {&x, &delta, &w, &b, &xd, &deltad, &wd, &bd}) t->set_requires_grad(true);
  const AddLayerNorm r = add_layer_norm(x, delta, {64}, w, b), rd = add_layer_norm(xd, deltad, {64}, wd, bd);
  EXPECT_TRUE(within_rel(r.sum, rd.sum, 0.0, 0.0));  // one f32 add of the same values
  EXPECT_TRUE(within_rel(r.out, rd.out, 1e-5, 1e-6));
  const Tensor g = random_tensor(r.out.shape(), DType::kF32, 615);
  sum(r.out * g + r.sum).backward();
  sum(rd.out * g.to(cuda(0)) + rd.sum).backward();
  EXPECT_TRUE(within_rel(x.grad(), xd.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(within_rel(delta.grad(), deltad.grad(), 2e-2, 1e-2));
  EXPECT_TRUE(within_rel(w.grad(), wd.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(within_rel(b.grad(), bd.grad(), 1e-4, 1e-5));
}

}  // namespace
}  // namespace mantissa
