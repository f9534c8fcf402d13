// DistributedDataParallel in a world of one (make_local_process_group): grads after finish() are a plain
// backward's bit for bit, buckets follow reverse registration order under the cap, no_sync accumulates,
// misuse errors. The 2- and 3-rank runs against one process are in tests/dist/ddp_dist.cc.
#include "train/ddp.h"

#include <gtest/gtest.h>

#include <cstring>

#include "framework/generator.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.shape() == cb.shape() && ca.dtype() == cb.dtype() &&
         std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

Tensor mlp_loss(MLP& m, const Tensor& x, const Tensor& y) { return mse_loss(m.forward(x), y); }

TEST(Ddp, WorldOfOneGradsEqualPlainBackwardBitForBit) {
  Generator ga(7), gb(7), gd(8);
  MLP plain(12, {32, 16}, 5, {.generator = &ga});
  MLP model(12, {32, 16}, 5, {.generator = &gb});
  auto pg = make_local_process_group();
  // A cap of 1 KiB splits the model into several buckets, so more than one all-reduce runs.
  DistributedDataParallel ddp(model, *pg, {.bucket_cap_mb = 1.0 / 1024});
  ASSERT_GT(ddp.bucket_names().size(), 2u);
  for (int step = 0; step < 2; ++step) {  // the second backward reuses the buckets after finish()
    const Tensor x = randn({6, 12}, {}, &gd), y = randn({6, 5}, {}, &gd);
    mlp_loss(plain, x, y).backward();
    mlp_loss(model, x, y).backward();
    ddp.finish();
    const auto pp = plain.named_parameters(), pm = model.named_parameters();
    for (size_t i = 0; i < pp.size(); ++i) {
      ASSERT_TRUE(pm[i].tensor.grad().defined()) << pm[i].name;
      EXPECT_TRUE(same_bits(pp[i].tensor.grad(), pm[i].tensor.grad())) << pm[i].name << " step " << step;
    }
  }
}

TEST(Ddp, BucketsInReverseRegistrationOrderUnderTheCap) {
  Generator g(1);
  // layers.0.weight 16x8 (512 B), layers.0.bias (64 B), layers.2.weight 4x16 (256 B), layers.2.bias (16 B).
  MLP model(8, {16}, 4, {.generator = &g});
  auto pg = make_local_process_group();
  using Names = std::vector<std::vector<std::string>>;
  EXPECT_EQ(DistributedDataParallel(model, *pg).bucket_names(),
            (Names{{"layers.2.bias", "layers.2.weight", "layers.0.bias", "layers.0.weight"}}));
  // 300 B: 16 + 256 fit; 272 + 64 does not; 64 + 512 does not.
  EXPECT_EQ(DistributedDataParallel(model, *pg, {.bucket_cap_mb = 300.0 / (1024 * 1024)}).bucket_names(),
            (Names{{"layers.2.bias", "layers.2.weight"}, {"layers.0.bias"}, {"layers.0.weight"}}));
  // A cap below every parameter: each gets a bucket of its own, none is dropped.
  EXPECT_EQ(DistributedDataParallel(model, *pg, {.bucket_cap_mb = 1e-9}).bucket_names(),
            (Names{{"layers.2.bias"}, {"layers.2.weight"}, {"layers.0.bias"}, {"layers.0.weight"}}));
  EXPECT_THROW(DistributedDataParallel(model, *pg, {.bucket_cap_mb = 0}), Error);
}

TEST(Ddp, NoSyncAccumulatesAndTheNextSyncedBackwardReducesTheSum) {
  Generator ga(3), gb(3), gd(4);
  MLP plain(6, {8}, 3, {.generator = &ga});
  MLP model(6, {8}, 3, {.generator = &gb});
  auto pg = make_local_process_group();
  DistributedDataParallel ddp(model, *pg, {.bucket_cap_mb = 1e-4});
  const Tensor x1 = randn({4, 6}, {}, &gd), y1 = randn({4, 3}, {}, &gd);
  const Tensor x2 = randn({4, 6}, {}, &gd), y2 = randn({4, 3}, {}, &gd);
  mlp_loss(plain, x1, y1).backward();
  mlp_loss(plain, x2, y2).backward();
  {
    auto guard = ddp.no_sync();
    mlp_loss(model, x1, y1).backward();
    ddp.finish();  // nothing to do inside no_sync
  }
  mlp_loss(model, x2, y2).backward();
  ddp.finish();
  const auto pp = plain.named_parameters(), pm = model.named_parameters();
  for (size_t i = 0; i < pp.size(); ++i) {
    EXPECT_TRUE(same_bits(pp[i].tensor.grad(), pm[i].tensor.grad())) << pm[i].name;
  }
}

TEST(Ddp, MisuseIsReported) {
  Module m;
  Tensor a = m.register_parameter("a", ones({3}));
  Tensor b = m.register_parameter("b", ones({2}));
  auto pg = make_local_process_group();
  DistributedDataParallel ddp(m, *pg);
  EXPECT_THROW(ddp.finish(), Error);  // no backward yet
  sum(a * 2.0).backward();            // b unused
  try {
    ddp.finish();
    ADD_FAILURE() << "an unused parameter must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  // After the error the state is reset: a backward reaching both works.
  sum(a * 2.0 + sum(b)).backward();
  ddp.finish();
  sum(a + sum(b)).backward();
  EXPECT_THROW(sum(a + sum(b)).backward(), Error);  // a second backward without finish()
  Module f;
  f.register_parameter("h", ones({2}, {.dtype = DType::kF64}));
  EXPECT_THROW(DistributedDataParallel(f, *pg), Error);  // f32 masters only
}

TEST(Ddp, HooksDoNothingAfterDestruction) {
  Module m;
  Tensor a = m.register_parameter("a", ones({3}));
  auto pg = make_local_process_group();
  { DistributedDataParallel ddp(m, *pg); }
  sum(a * 3.0).backward();  // the dead DDP's hook must neither crash nor throw
  EXPECT_TRUE(same_bits(a.grad(), full({3}, 3.0, {.dtype = DType::kF32})));
}

}  // namespace
}  // namespace mantissa
