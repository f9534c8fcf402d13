// Persistent working copies: the optimizer keeps each fp32 master's f16/bf16 copy current, autocast uses it
// instead of re-casting, and the training is bit-identical to re-casting every forward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "framework/autograd.h"
#include "framework/random.h"
#include "models/layers/activation.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"

namespace mantissa {
namespace {

struct TrainingRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
  uint64_t weight_casts = 0;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

// 8-16-4 MLP, AdamW, `steps` steps under autocast (dtype), optionally with working copies.
TrainingRun train(DType dtype, bool working_copies, int steps) {
  manual_seed(11);
  Sequential model(std::make_shared<Linear>(8, 16), std::make_shared<ReLU>(), std::make_shared<Linear>(16, 4));
  AdamW opt(model.named_parameters(), {.lr = 1e-2});
  if (working_copies) opt.enable_working_copies(dtype);
  Generator gen(5);
  const Tensor x = randn({32, 8}, {}, &gen);
  const Tensor y = from_vector<int64_t>(std::vector<int64_t>(32, 1), {32});
  TrainingRun run;
  const uint64_t casts_before = amp::weight_cast_count();
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard guard({.dtype = dtype});
      loss = cross_entropy(model.forward(x), y);
    }
    loss.backward();
    opt.step();
    run.losses.push_back(loss.item());
  }
  run.weight_casts = amp::weight_cast_count() - casts_before;
  for (const auto& p : model.named_parameters()) run.params.push_back(p.tensor.clone());
  return run;
}

class WorkingCopies : public ::testing::TestWithParam<DType> {};

TEST_P(WorkingCopies, BitIdenticalToRecastingAndNoCasts) {
  const TrainingRun recast = train(GetParam(), false, 5);
  const TrainingRun copies = train(GetParam(), true, 5);
  EXPECT_EQ(recast.losses, copies.losses);
  ASSERT_EQ(recast.params.size(), copies.params.size());
  for (size_t i = 0; i < recast.params.size(); ++i) EXPECT_TRUE(same_bits(recast.params[i], copies.params[i])) << i;
  EXPECT_EQ(recast.weight_casts, 5u * 4u) << "4 parameters cast once per forward";
  EXPECT_EQ(copies.weight_casts, 0u) << "the working copies replace every cast";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, WorkingCopies, ::testing::Values(DType::kF16, DType::kBF16));

TEST(WorkingCopiesState, CopyIsTheRoundedMasterAndSkippedStepsLeaveIt) {
  manual_seed(3);
  Linear layer(4, 3);
  AdamW opt(layer.named_parameters(), {.lr = 0.1});
  opt.enable_working_copies(DType::kF16);
  EXPECT_EQ(amp::working_copy_count(), 2u);
  EXPECT_TRUE(same_bits(opt.working_copy("weight"), layer.weight.to(DType::kF16)));
  amp::GradScaler scaler({.init_scale = 1.0});
  // A step with an inf gradient is skipped: master and copy unchanged.
  const Tensor before = opt.working_copy("weight").clone();
  layer.weight.set_grad(full({3, 4}, INFINITY));
  layer.bias.set_grad(zeros({3}));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_TRUE(same_bits(opt.working_copy("weight"), before));
  // A clean step moves the master and the copy follows, rounded once.
  layer.weight.set_grad(ones({3, 4}));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_FALSE(same_bits(opt.working_copy("weight"), before));
  EXPECT_TRUE(same_bits(opt.working_copy("weight"), layer.weight.to(DType::kF16)));
  opt.disable_working_copies();
  EXPECT_EQ(amp::working_copy_count(), 0u);
  EXPECT_FALSE(opt.working_copy("weight").defined());
}

TEST(WorkingCopiesState, ErrorsNameTheProblem) {
  Linear layer(2, 2);
  AdamW opt(layer.named_parameters(), {});
  try {
    opt.enable_working_copies(DType::kF32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("enable_working_copies: dtype must be f16 or bf16, got f32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(amp::set_working_copy(layer.weight, zeros({3, 3}, {.dtype = DType::kF16})), Error);
}

}  // namespace
}  // namespace mantissa

namespace mantissa {
namespace {

// Inference without an optimizer: ScopedWorkingCopies gives the same outputs as casting, casts no weight
// while it lives, follows the masters after refresh(), and leaves nothing behind.
TEST(ScopedWorkingCopies, InferenceCastsNoWeightAndIsBitIdentical) {
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    manual_seed(3);
    Sequential model(std::make_shared<Linear>(8, 16), std::make_shared<ReLU>(), std::make_shared<Linear>(16, 4));
    Generator gen(4);
    const Tensor x = randn({5, 8}, {}, &gen);
    NoGradGuard no_grad;
    auto forward = [&] {
      amp::AutocastGuard guard({.dtype = dtype});
      return model.forward(x);
    };
    const Tensor cast = forward();
    const size_t copies_before = amp::working_copy_count();
    {
      amp::ScopedWorkingCopies copies(model.parameters(), dtype);
      EXPECT_EQ(amp::working_copy_count(), copies_before + 4);
      const uint64_t casts_before = amp::weight_cast_count();
      EXPECT_TRUE(same_bits(forward(), cast)) << dtype_name(dtype);
      EXPECT_EQ(amp::weight_cast_count(), casts_before) << "a weight was cast although its copy exists";
      // Change a master: the stale copy is used until refresh(), then the outputs follow the master.
      copy_(model.parameters()[0], mul(model.parameters()[0], 0.5));
      EXPECT_TRUE(same_bits(forward(), cast));
      copies.refresh();
      EXPECT_FALSE(same_bits(forward(), cast));
    }
    EXPECT_EQ(amp::working_copy_count(), copies_before);
    EXPECT_THROW(amp::ScopedWorkingCopies(model.parameters(), DType::kF32), Error);
  }
}

}  // namespace
}  // namespace mantissa
