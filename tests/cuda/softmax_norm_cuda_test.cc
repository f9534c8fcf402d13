// CUDA softmax, log_softmax, cross-entropy and layer_norm against the CPU, forward and backward, in f32,
// f16 and bf16, with rows handled by a warp (<= 1024 wide) and by a block (wider), softmax along the
// last and a middle dim, and cross-entropy with ignored targets in all three reductions; the fused
// cross-entropy also against the composed log_softmax + nll; and all of them with more rows than one
// grid holds. Skipped without a device.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "framework/autograd.h"
#include "framework/cuda/device.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/norm/norm.h"
#include "ops/softmax/row_math.h"
#include "ops/softmax/softmax.h"
#include "tests/cuda/cuda_compare.h"

namespace mantissa {
namespace {

using testing::on_cuda;
using testing::random_tensor;
using testing::within_rel;

// f32: both backends use exp within 2 ulp and sum the row in f32 in different orders (n <= 3000 terms
// of a positive series, relative error ~1e-6 in the sum); outputs in [0, 1] or log-probabilities of
// magnitude ~10: 1e-5 relative + 1e-6 absolute. 16-bit: one rounding of the output on top, half an
// ulp of 2^-11 (f16) or 2^-8 (bf16), plus a neighbouring-value flip: 2e-3 / 1.6e-2 relative.
struct Tol {
  double rtol, atol;
};
Tol tol_for(DType dt) {
  if (dt == DType::kF32) return {1e-5, 1e-6};
  if (dt == DType::kF16) return {2e-3, 1e-4};
  return {1.6e-2, 1e-3};
}

// Rows past what one launch's grid covers at `rows_per_block` rows per block, plus an uneven remainder.
int64_t gpu_row_groups_past_grid(int rows_per_block) { return gpu::kMaxRowBlocks * rows_per_block + 13; }

TEST(CudaSoftmax, ForwardAndBackwardMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tol t = tol_for(dt);
    for (const Shape& shape : {Shape{64, 100}, Shape{6, 3000}, Shape{4, 50, 7}}) {
      for (int64_t dim : {-1, 1}) {
        for (bool log_form : {false, true}) {
          auto fn = [&](const Tensor& x) { return log_form ? log_softmax(x, dim) : softmax(x, dim); };
          Tensor x = random_tensor(shape, dt, 301, -8.0, 8.0);
          Tensor xd = on_cuda(x);
          x.set_requires_grad(true);
          xd.set_requires_grad(true);
          const Tensor y = fn(x), yd = fn(xd);
          EXPECT_TRUE(within_rel(y, yd, t.rtol, t.atol)) << dtype_name(dt) << shape_str(shape) << dim << log_form;
          const Tensor g = random_tensor(shape, dt, 302);
          y.backward(g);
          yd.backward(on_cuda(g));
          // The backward reads y (already within the forward's tolerance) and a row sum: twice as wide.
          EXPECT_TRUE(within_rel(x.grad(), xd.grad(), 2 * t.rtol, 2 * t.atol))
              << "backward " << dtype_name(dt) << shape_str(shape) << dim << log_form;
        }
      }
    }
  }
}

TEST(CudaCrossEntropy, AllReductionsWithIgnoredTargetsMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tol t = tol_for(dt);
    for (int64_t classes : {10, 5000}) {
      Tensor logits = random_tensor({33, classes}, dt, 303, -5.0, 5.0);
      std::vector<int64_t> tv(33);
      for (size_t i = 0; i < tv.size(); ++i) tv[i] = i % 7 == 3 ? -100 : static_cast<int64_t>((i * 37) % classes);
      const Tensor target = from_vector<int64_t>(tv, {33});
      for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
        Tensor ld = on_cuda(logits.detach());
        logits = logits.detach();
        logits.set_requires_grad(true);
        ld.set_requires_grad(true);
        const Tensor loss = cross_entropy(logits, target, {.reduction = r});
        const Tensor loss_d = cross_entropy(ld, on_cuda(target), {.reduction = r});
        EXPECT_TRUE(within_rel(loss, loss_d, t.rtol, t.atol)) << dtype_name(dt) << " classes " << classes;
        const Tensor g = r == Reduction::kNone ? random_tensor({33}, dt, 304) : full({}, 1.5, {.dtype = dt});
        loss.backward(g);
        loss_d.backward(on_cuda(g));
        EXPECT_TRUE(within_rel(logits.grad(), ld.grad(), 2 * t.rtol, 2 * t.atol))
            << "backward " << dtype_name(dt) << " classes " << classes;
      }
    }
  }
}

TEST(CudaCrossEntropy, FusedEqualsComposedLogSoftmaxNll) {
  MT_SKIP_WITHOUT_CUDA();
  // [N, C, d] logits (classes along dim 1, positions along the trailing dim) on the GPU against the
  // composed CPU path: the same quantities, f32 within the softmax tolerance.
  const Tensor logits = random_tensor({4, 9, 6}, DType::kF32, 305, -4.0, 4.0);
  std::vector<int64_t> tv(24);
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = static_cast<int64_t>((i * 5) % 9);
  const Tensor target = from_vector<int64_t>(tv, {4, 6});
  const Tensor composed = nll_loss(log_softmax(logits, 1), target);
  EXPECT_TRUE(within_rel(composed, cross_entropy(on_cuda(logits), on_cuda(target)), 1e-5, 1e-6));
}

TEST(CudaMseLoss, AllReductionsMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      Tensor a = random_tensor({17, 40}, dt, 320), b = random_tensor({17, 40}, dt, 321);
      Tensor ad = on_cuda(a), bd = on_cuda(b);
      for (Tensor* p : {&a, &b, &ad, &bd}) p->set_requires_grad(true);
      const Tensor l = mse_loss(a, b, r), ld = mse_loss(ad, bd, r);
      // kNone: one formula, exact. kMean/kSum: 680 squares summed in f64 on the CPU, f32 on the GPU:
      // 1e-5 relative (plus the 16-bit output rounding).
      const Tol t = tol_for(dt);
      EXPECT_TRUE(within_rel(l, ld, r == Reduction::kNone ? 0.0 : t.rtol, 0)) << dtype_name(dt);
      const Tensor g = r == Reduction::kNone ? random_tensor({17, 40}, dt, 322) : full({}, 0.5, {.dtype = dt});
      l.backward(g);
      ld.backward(on_cuda(g));
      // The same formula on both sides: exact.
      EXPECT_TRUE(testing::within_ulps(a.grad(), ad.grad(), 0)) << dtype_name(dt);
      EXPECT_TRUE(testing::within_ulps(b.grad(), bd.grad(), 0)) << dtype_name(dt);
    }
  }
}

TEST(CudaLayerNorm, ForwardAndBackwardMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tol t = tol_for(dt);
    for (int64_t cols : {768, 2000}) {
      Tensor x = random_tensor({3, 37, cols}, dt, 306, -3.0, 3.0);
      Tensor w = random_tensor({cols}, DType::kF32, 307, 0.5, 1.5);  // f32 parameters, as the mixed case
      Tensor b = random_tensor({cols}, DType::kF32, 308);
      if (dt == DType::kF32) {
        w = w.to(dt);
        b = b.to(dt);
      }
      Tensor xd = on_cuda(x), wd = on_cuda(w), bd = on_cuda(b);
      for (Tensor* p : {&x, &w, &b, &xd, &wd, &bd}) p->set_requires_grad(true);
      const Tensor y = layer_norm(x, {cols}, w, b), yd = layer_norm(xd, {cols}, wd, bd);
      // Statistics summed in a different order (f32): ~1e-6 relative on mean and rstd.
      EXPECT_TRUE(within_rel(y, yd, t.rtol, 10 * t.atol)) << dtype_name(dt) << " cols " << cols;
      const Tensor g = random_tensor({3, 37, cols}, dt, 309);
      y.backward(g);
      yd.backward(on_cuda(g));
      EXPECT_TRUE(within_rel(x.grad(), xd.grad(), 4 * t.rtol, 10 * t.atol)) << "dx " << dtype_name(dt);
      // dw, db: sums over 111 rows in f32, different order: 1e-5 relative of terms of size ~1 (atol).
      EXPECT_TRUE(within_rel(w.grad(), wd.grad(), 1e-5, 1e-4)) << "dw " << dtype_name(dt);
      EXPECT_TRUE(within_rel(b.grad(), bd.grad(), 1e-5, 1e-4)) << "db " << dtype_name(dt);
    }
  }
  // Many rows: the weight/bias gradients are sliced over the rows and added in slice order.
  Tensor x = random_tensor({8192, 64}, DType::kF32, 310), w = random_tensor({64}, DType::kF32, 311);
  Tensor xd = on_cuda(x), wd = on_cuda(w);
  for (Tensor* p : {&w, &wd}) p->set_requires_grad(true);
  layer_norm(x, {64}, w).backward(ones({8192, 64}));
  layer_norm(xd, {64}, wd).backward(on_cuda(ones({8192, 64})));
  // 8192 terms of magnitude <= ~4 in f32 in different orders: 1e-4 relative + 1e-3 absolute.
  EXPECT_TRUE(within_rel(w.grad(), wd.grad(), 1e-4, 1e-3));
}

// [rows, cols] values whose rows all differ (not shifts or scalings of one another, which softmax and
// layer_norm would map to the same output): x[i, j] = b[j] + a[i] c[j], from rows + 2 cols random values
// (drawing rows * cols of them would dominate the test's time).
Tensor distinct_rows(int64_t rows, int64_t cols, uint64_t seed) {
  const Tensor a = random_tensor({rows, 1}, DType::kF32, seed, 0.5, 2.0);
  const Tensor b = random_tensor({1, cols}, DType::kF32, seed + 1);
  const Tensor c = random_tensor({1, cols}, DType::kF32, seed + 2);
  return add(b, mul(a, c));
}

// More rows than one grid holds (row_math.h's kMaxRowBlocks blocks of 8 warp-rows, or of one block-row):
// the row groups stride over the grid, and every row is written with its own values, forward and backward.
TEST(CudaRowKernels, MoreRowsThanTheGridHoldsMatchCpu) {
  MT_SKIP_WITHOUT_CUDA();
  const Tol t = tol_for(DType::kF32);
  const int64_t warp_rows = gpu_row_groups_past_grid(8), block_rows = gpu_row_groups_past_grid(1);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{warp_rows, 5}, {block_rows, 1025}}) {
    const std::string what = std::to_string(rows) + " x " + std::to_string(cols);
    {  // softmax and log_softmax
      for (bool log_form : {false, true}) {
        auto fn = [&](const Tensor& x) { return log_form ? log_softmax(x, 1) : softmax(x, 1); };
        Tensor x = distinct_rows(rows, cols, 330);
        Tensor xd = on_cuda(x);
        x.set_requires_grad(true);
        xd.set_requires_grad(true);
        const Tensor y = fn(x), yd = fn(xd);
        EXPECT_TRUE(within_rel(y, yd, t.rtol, t.atol)) << what << (log_form ? " log_softmax" : " softmax");
        const Tensor g = distinct_rows(rows, cols, 333);
        y.backward(g);
        yd.backward(on_cuda(g));
        EXPECT_TRUE(within_rel(x.grad(), xd.grad(), 2 * t.rtol, 2 * t.atol)) << what << " backward";
      }
    }
    {  // cross-entropy, every 11th target ignored; summed, so that each gradient is O(1) (a mean over this
       // many positions would put every gradient under the absolute tolerance)
      std::vector<int64_t> tv(static_cast<size_t>(rows));
      for (size_t i = 0; i < tv.size(); ++i) tv[i] = i % 11 == 5 ? -100 : static_cast<int64_t>((i * 7) % cols);
      const Tensor target = from_vector<int64_t>(tv, {rows});
      Tensor x = distinct_rows(rows, cols, 336);
      Tensor xd = on_cuda(x);
      x.set_requires_grad(true);
      xd.set_requires_grad(true);
      const CrossEntropyOptions summed{.reduction = Reduction::kSum};
      const Tensor loss = cross_entropy(x, target, summed), loss_d = cross_entropy(xd, on_cuda(target), summed);
      EXPECT_TRUE(within_rel(loss, loss_d, t.rtol, t.atol)) << what << " cross_entropy";
      loss.backward();
      loss_d.backward();
      EXPECT_TRUE(within_rel(x.grad(), xd.grad(), 2 * t.rtol, 2 * t.atol)) << what << " cross_entropy backward";
    }
    {  // layer_norm without affine parameters: the row kernels only
      Tensor x = distinct_rows(rows, cols, 339);
      Tensor xd = on_cuda(x);
      x.set_requires_grad(true);
      xd.set_requires_grad(true);
      const Tensor y = layer_norm(x, {cols}), yd = layer_norm(xd, {cols});
      EXPECT_TRUE(within_rel(y, yd, t.rtol, 10 * t.atol)) << what << " layer_norm";
      const Tensor g = distinct_rows(rows, cols, 342);
      y.backward(g);
      yd.backward(on_cuda(g));
      EXPECT_TRUE(within_rel(x.grad(), xd.grad(), 4 * t.rtol, 10 * t.atol)) << what << " layer_norm backward";
    }
  }
}

}  // namespace
}  // namespace mantissa
