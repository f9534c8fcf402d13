// Synchronized BatchNorm in a world of one: the same numbers as BatchNorm2d (forward, backward, running
// statistics, 16-bit input), gradients against finite differences in f64, a stable variance where
// E[x^2] - E[x]^2 would cancel, one collective per forward and per backward (none in eval), and the
// conversion of a model's layers. N ranks against one process: tests/dist/batchnorm_dist.cc.
#include "models/layers/sync_batch_norm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "amp/autocast.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/cnn.h"
#include "models/layers/activation.h"
#include "models/layers/norm.h"
#include "models/layers/sequential.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm.h"
#include "ops/reduce/reduce.h"
#include "tests/ops/nn_testing.h"
#include "tests/support/gradcheck.h"

namespace mantissa {
namespace {

using testing::all_close;
using ::testing::HasSubstr;

// A world of one that counts its collectives.
class CountingGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string_view backend() const override { return "counting"; }
  std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    ++all_reduces;
    return local_->all_reduce_async(t, op);
  }
  void broadcast(const Tensor& t, int root) override { local_->broadcast(t, root); }
  Tensor all_gather(const Tensor& t) override { return local_->all_gather(t); }
  void barrier() override {}
  int all_reduces = 0;

 private:
  std::unique_ptr<ProcessGroup> local_ = make_local_process_group();
};

// Two BatchNorm2d with the same random affine parameters, one of them synchronized over `group`.
struct Pair {
  BatchNorm2d plain, synced;
  Pair(int64_t channels, ProcessGroup& group, uint64_t seed) : plain(channels), synced(channels) {
    Generator g(seed);
    const Tensor w = randn({channels}, {}, &g), b = randn({channels}, {}, &g);
    for (BatchNorm2d* bn : {&plain, &synced}) {
      copy_(bn->weight.detach(), w);
      copy_(bn->bias.detach(), b);
    }
    synced.options.process_group = &group;
  }
};

// f32, x with an offset and a scale. The two compute the same formulas in another order (batch_norm: a
// fused kernel, statistics in f64 from f32 sums; sync: composed f32 ops and Chan's merge), so they differ
// by float rounding only: over 5 seeds the worst element used a fifth of the tolerance 1e-5 relative plus
// 1e-6 absolute (outputs and gradients of O(1)), and the running statistics differed by 1.2e-7 relative.
// A wrong variance (biased for unbiased, eps misplaced) or a statistics term missing from the gradient is
// off by 1e-2 or more.
TEST(SyncBatchNorm, WorldOfOneMatchesBatchNorm2d) {
  CountingGroup group;
  Pair p(3, group, 1);
  Generator g(2);
  const Tensor x0 = add(mul(randn({4, 3, 5, 6}, {}, &g), 2.5), 3.0);
  const Tensor dy = randn({4, 3, 5, 6}, {}, &g);
  std::vector<Tensor> grads[2];
  Tensor outs[2];
  int k = 0;
  for (BatchNorm2d* bn : {&p.plain, &p.synced}) {
    Tensor x = x0.clone().set_requires_grad(true);
    for (int step = 0; step < 2; ++step) outs[k] = bn->forward(x);  // two updates of the running statistics
    sum(mul(outs[k], dy)).backward();
    grads[k] = {x.grad(), bn->weight.grad(), bn->bias.grad()};
    ++k;
  }
  EXPECT_EQ(outs[1].dtype(), DType::kF32);
  EXPECT_TRUE(all_close(outs[1], outs[0], 1e-5, 1e-6)) << "output";
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 1e-5, 1e-6)) << "gradient " << i;
  EXPECT_TRUE(all_close(p.synced.running_mean, p.plain.running_mean, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(p.synced.running_var, p.plain.running_var, 1e-6, 1e-7));
  EXPECT_EQ(p.synced.num_batches_tracked.item(), 2.0);
  // Two forwards and one backward (its graph reaches the second forward's all-reduce only).
  EXPECT_EQ(group.all_reduces, 3);
  EXPECT_EQ(p.synced.type_name(), "SyncBatchNorm");
  EXPECT_EQ(p.plain.type_name(), "BatchNorm2d");
}

// f16 input, f32 parameters (autocast's case): the statistics in f32 and the output rounded to f16 once,
// as batch_norm does. The two agree to float rounding before that rounding, so the f16 outputs are equal
// (measured, 5 seeds) or, where an f32 value falls next to a rounding tie, one f16 ulp apart: 2^-10
// relative, 1e-3 absolute near zero.
TEST(SyncBatchNorm, SixteenBitInputComputesInF32) {
  CountingGroup group;
  Pair p(4, group, 3);
  Generator g(4);
  const Tensor x = add(randn({6, 4, 3, 3}, {}, &g), 1.0).to(DType::kF16);
  const Tensor plain = p.plain.forward(x), synced = p.synced.forward(x);
  EXPECT_EQ(synced.dtype(), DType::kF16);
  EXPECT_TRUE(all_close(synced, plain, 1.0 / 1024, 1e-3));
  EXPECT_TRUE(all_close(p.synced.running_var, p.plain.running_var, 1e-6, 1e-7));  // f32 buffers, f32 statistics
  // Under autocast the f32 masters stay f32 and the result is the input's dtype.
  amp::AutocastGuard autocast({.device = DeviceType::kCPU, .dtype = DType::kBF16});
  EXPECT_EQ(p.synced.forward(x.to(DType::kBF16)).dtype(), DType::kBF16);
}

TEST(SyncBatchNorm, GradientsMatchFiniteDifferences) {
  CountingGroup group;
  Tensor x = testing::random_input({3, 2, 2, 3}, 5);
  Tensor w = testing::random_input({2}, 6), b = testing::random_input({2}, 7);
  EXPECT_TRUE(testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return sync_batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], group, 0.1, 1e-5);
      },
      {x, w, b}));
  // [N, C] without affine parameters.
  EXPECT_TRUE(testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return sync_batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), group);
      },
      {testing::random_input({5, 3}, 8)}));
}

// Values 1e4 + N(0, 1): in f32, E[x^2] - E[x]^2 subtracts two numbers near 1e8 whose ulp is 8, and gave
// the variances (1.005 and 1.065) as 0 and 8. The two-pass statistics are off by 1.4e-6 relative to the
// f64 variance of the same f32 values (measured); 1e-5 leaves room for other summation orders.
TEST(SyncBatchNorm, VarianceIsStableForLargeMeans) {
  CountingGroup group;
  Generator g(9);
  const Tensor x64 = add(randn({16, 2, 8, 8}, {.dtype = DType::kF64}, &g), 1e4);
  const Tensor x = x64.to(DType::kF32);
  Tensor running_mean = zeros({2}), running_var = zeros({2});
  sync_batch_norm(x, running_mean, running_var, Tensor(), Tensor(), group, /*momentum=*/1.0);
  const Tensor expected = var(x.to(DType::kF64), {0, 2, 3});  // unbiased, of the f32 values, in f64
  EXPECT_TRUE(all_close(running_var, expected, 1e-5, 0.0));
  EXPECT_TRUE(all_close(running_mean, mean(x.to(DType::kF64), {0, 2, 3}), 1e-7, 0.0));
}

TEST(SyncBatchNorm, EvalModeUsesRunningStatisticsWithoutCommunicating) {
  CountingGroup group;
  Pair p(2, group, 10);
  Generator g(11);
  const Tensor x = randn({3, 2, 4, 4}, {}, &g);
  p.plain.forward(x);
  p.synced.forward(x);
  const int after_training = group.all_reduces;
  p.plain.eval();
  p.synced.eval();
  EXPECT_TRUE(all_close(p.synced.forward(x), p.plain.forward(x), 1e-6, 1e-6));
  EXPECT_EQ(group.all_reduces, after_training);
}

TEST(SyncBatchNorm, AllReduceSumIsDifferentiable) {
  CountingGroup group;
  Tensor x = from_vector<double>({1, 2, 3}).set_requires_grad(true);
  Tensor y = all_reduce_sum(x, group);
  EXPECT_EQ(testing::values_f64(y), (std::vector<double>{1, 2, 3}));
  y.data<double>()[0] = 10;  // a new tensor: x is not the output
  EXPECT_EQ(x.data<double>()[0], 1.0);
  sum(mul(y, 2.0)).backward();
  EXPECT_EQ(testing::values_f64(x.grad()), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(group.all_reduces, 2);
}

TEST(SyncBatchNorm, MisuseIsReported) {
  CountingGroup group;
  EXPECT_THAT(
      [&] {
        sync_batch_norm(zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), group);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("more than one value per channel")));
  EXPECT_THAT(
      [&] {
        sync_batch_norm(zeros({2, 3, 2}), Tensor(), Tensor(), ones({2}), Tensor(), group);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("sync_batch_norm: weight must be a floating [3] tensor")));
  EXPECT_THAT(
      [&] {
        sync_batch_norm(zeros({2, 3}), zeros({3}), Tensor(), Tensor(), Tensor(), group);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("both running_mean and running_var")));
  EXPECT_THAT([&] { sync_batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), group); },
              ::testing::ThrowsMessage<Error>(HasSubstr("expected a floating input [N, C, *]")));
}

TEST(SyncBatchNorm, ConvertSwapsEveryBatchNorm2dAndKeepsTheNames) {
  CountingGroup group;
  CNN cnn;
  std::vector<std::string> before;
  for (const NamedTensor& t : cnn.state_dict()) before.push_back(t.name);
  EXPECT_EQ(convert_sync_batchnorm(cnn, group), 2);
  EXPECT_EQ(cnn.bn1->type_name(), "SyncBatchNorm");
  EXPECT_EQ(cnn.bn2->options.process_group, &group);
  std::vector<std::string> after;
  for (const NamedTensor& t : cnn.state_dict()) after.push_back(t.name);
  EXPECT_EQ(after, before);
  cnn.forward(randn({2, 1, 28, 28}));
  EXPECT_EQ(group.all_reduces, 2);  // one per layer

  // Nested, and one layer held by two parents: converted once.
  auto shared = std::make_shared<BatchNorm2d>(4);
  Sequential outer(std::make_shared<BatchNorm2d>(1), shared,
                   std::make_shared<Sequential>(std::make_shared<ReLU>(), shared));
  EXPECT_EQ(convert_sync_batchnorm(outer, group), 2);
  EXPECT_EQ(shared->type_name(), "SyncBatchNorm");
  MLP mlp(4, {8}, 2);
  EXPECT_EQ(convert_sync_batchnorm(mlp, group), 0);
}

}  // namespace
}  // namespace mantissa
