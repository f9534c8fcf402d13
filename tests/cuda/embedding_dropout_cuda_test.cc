// CUDA embedding and dropout against the CPU. Dropout draws its mask from the generator's Philox stream
// on the device, so the mask, the output and the generator's next state equal the CPU's exactly.
// Skipped without a device.
#include <gtest/gtest.h>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "framework/generator.h"
#include "ops/dropout/dropout.h"
#include "ops/embedding/embedding.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::on_cuda;
using testing::random_tensor;
using testing::within_rel;
using testing::within_ulps;

TEST(CudaDropout, SameMaskOutputAndGeneratorStateAsCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int skip : {0, 1, 3}) {  // start at every offset within a Philox block
      Generator cpu_gen(11), gpu_gen(11);
      for (int i = 0; i < skip; ++i) {
        cpu_gen.next_u32();
        gpu_gen.next_u32();
      }
      Tensor x = random_tensor({129, 31}, dt, 401);
      Tensor xd = on_cuda(x);
      x.set_requires_grad(true);
      xd.set_requires_grad(true);
      const Tensor y = dropout(x, 0.3, &cpu_gen), yd = dropout(xd, 0.3, &gpu_gen);
      // Same words, same threshold, same x * scale in the compute type: exact.
      EXPECT_TRUE(within_ulps(y, yd, 0)) << dtype_name(dt) << " skip " << skip;
      EXPECT_EQ(cpu_gen.state(), gpu_gen.state());
      const Tensor g = random_tensor({129, 31}, dt, 402);
      y.backward(g);
      yd.backward(on_cuda(g));
      EXPECT_TRUE(within_ulps(x.grad(), xd.grad(), 0)) << dtype_name(dt);
    }
  }
  // p = 1 drops everything.
  const Tensor zero = dropout(on_cuda(ones({5})), 1.0);
  EXPECT_TRUE(within_ulps(zeros({5}), zero, 0));
}

TEST(CudaEmbedding, ForwardAndBackwardMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  std::vector<int64_t> iv(4 * 7);
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int64_t>((i * 13) % 9);  // repeats
  const Tensor idx = from_vector<int64_t>(iv, {4, 7});
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor w = random_tensor({50, 16}, dt, 403);
    Tensor wd = on_cuda(w);
    w.set_requires_grad(true);
    wd.set_requires_grad(true);
    const Tensor y = embedding(w, idx), yd = embedding(wd, on_cuda(idx));
    EXPECT_TRUE(within_ulps(y, yd, 0)) << dtype_name(dt);  // a gather: exact
    const Tensor g = random_tensor({4, 7, 16}, dt, 404);
    y.backward(g);
    yd.backward(on_cuda(g));
    // Each row adds up to 4 gradient rows in f32 (atomics: any order), then rounds once: f32 within a
    // few ulps of the sum (1e-6 relative, 1e-6 absolute for cancellations); 16-bit within one rounding.
    const double tol = dt == DType::kF32 ? 1e-6 : (dt == DType::kF16 ? 1e-3 : 8e-3);
    EXPECT_TRUE(within_rel(w.grad(), wd.grad(), tol, tol)) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace mantissa
