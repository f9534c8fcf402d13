// The Trainer in fp8 (Precision::kFp8): which linears it runs in FP8, the scaling state in its checkpoints,
// a resume under another recipe refused, the overflow count in the step metrics. (The precision, resume,
// stop and read-lag suites of trainer_test.cc run in fp8 as well.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/train/checkpoint_support.h"
#include "tests/train/trainer_rig.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace mantissa {
namespace {

using testing::flat_weights;
using testing::Rig;

// FP8 in the Trainer: the linears with 16-multiple features run in FP8 (here the 16 -> 32 layer; the 32 -> 4
// head stays bf16), the state is in checkpoints with its recipe, a resume under another recipe is refused,
// and the step metrics carry the overflow count.
TEST(TrainerFp8Test, ManagesTheFp8LinearsCheckpointsTheStateAndRefusesAnotherRecipe) {
  Rig s;
  TrainerConfig c{.precision = Precision::kFp8, .max_steps = 6};
  c.fp8_recipe = amp::Fp8Recipe::delayed(4);
  Trainer trainer(c, s.model, s.task(), s.adam, s.train);
  ASSERT_NE(trainer.fp8(), nullptr);
  EXPECT_EQ(trainer.fp8()->managed(), std::vector<std::string>{"layers.0.weight"});
  std::vector<StepMetrics> steps;
  trainer.on_step_end([&](const StepMetrics& m) { steps.push_back(m); });
  ASSERT_TRUE(trainer.fit().ok());
  ASSERT_EQ(steps.size(), 6u);
  for (const StepMetrics& m : steps) {
    ASSERT_TRUE(m.fp8_overflows.has_value());
    EXPECT_GE(*m.fp8_overflows, 0);
  }
  EXPECT_EQ(trainer.fp8()->steps(), 6);
  const Checkpoint saved = trainer.checkpoint();
  EXPECT_EQ(saved.meta.precision, "fp8");
  EXPECT_EQ(saved.fp8.recipe, c.fp8_recipe.str());
  const std::vector<NamedTensor> state = trainer.fp8()->state_dict();
  ASSERT_EQ(saved.fp8.tensors.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(saved.fp8.tensors[i].name, state[i].name);
    EXPECT_TRUE(testing::same_bytes(saved.fp8.tensors[i].tensor, state[i].tensor)) << state[i].name;
  }
  // After six steps the delayed input scale has moved off its initial 1.
  bool moved = false;
  for (const NamedTensor& t : saved.fp8.tensors) {
    if (t.name == "layers.0.weight/input/scale") moved = t.tensor.item() != 1.0;
  }
  EXPECT_TRUE(moved);

  Rig other;
  TrainerConfig d = c;
  d.fp8_recipe = amp::Fp8Recipe::dynamic();
  Trainer resumed(d, other.model, other.task(), other.adam, other.train);
  const absl::Status refused = resumed.restore(saved, "run.h5");
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.message()).find("written with the FP8 recipe"), std::string::npos) << refused;
  Checkpoint without = saved;
  without.fp8 = {};
  Trainer plain(c, other.model, other.task(), other.adam, other.train);
  const absl::Status missing = plain.restore(without, "run.h5");
  EXPECT_NE(std::string(missing.message()).find("has no /fp8 scaling state"), std::string::npos) << missing;
}

// Every block-scaled recipe through the Trainer: a run stopped at step 5, saved to an HDF5 file and continued by a
// new Trainer (other initial weights, another FP8 seed: the checkpoint's rounding key wins) gives the
// uninterrupted run's losses and weights bit for bit, stochastic rounding's stream included; a resume under
// another block recipe is refused.
TEST(TrainerFp8Test, BlockRecipesResumeBitForBitFromAFile) {
  constexpr int64_t kSteps = 12, kStop = 5;
  for (const amp::Fp8Recipe& recipe : {amp::Fp8Recipe::rowwise(), amp::Fp8Recipe::blockwise(), amp::Fp8Recipe::mxfp8(),
                                       amp::Fp8Recipe::nvfp4(), amp::Fp8Recipe::mxfp4()}) {
    SCOPED_TRACE(recipe.str());
    auto config = [&](int64_t max_steps, uint64_t seed) {
      TrainerConfig c{.precision = Precision::kFp8, .max_steps = max_steps};
      c.fp8_recipe = recipe;
      c.fp8.seed = seed;
      return c;
    };
    std::vector<double> full_losses;
    std::vector<float> full_weights;
    {
      Rig s;
      Trainer trainer(config(kSteps, 1), s.model, s.task(), s.adam, s.train);
      trainer.on_step_end([&](const StepMetrics& m) { full_losses.push_back(m.loss); });
      ASSERT_TRUE(trainer.fit().ok());
      full_weights = flat_weights(s.model);
    }
    const std::string path = ::testing::TempDir() + "/fp8_block_resume.h5";
    {
      Rig s;
      Trainer trainer(config(kStop, 1), s.model, s.task(), s.adam, s.train);
      ASSERT_TRUE(trainer.fit().ok());
      ASSERT_TRUE(save_checkpoint(path, trainer.checkpoint()).ok());
    }
    const absl::StatusOr<Checkpoint> loaded = load_checkpoint(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->fp8.recipe, recipe.str());
    Rig s({32}, 32, 512, /*init_seed=*/1234);
    Trainer trainer(config(kSteps, 99), s.model, s.task(), s.adam, s.train);
    ASSERT_TRUE(trainer.restore(*loaded).ok());
    std::vector<double> resumed;
    trainer.on_step_end([&](const StepMetrics& m) { resumed.push_back(m.loss); });
    ASSERT_TRUE(trainer.fit().ok());
    ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps - kStop));
    for (int64_t i = 0; i < kSteps - kStop; ++i)
      EXPECT_EQ(resumed[i], full_losses[kStop + i]) << "step " << kStop + i + 1;
    EXPECT_EQ(flat_weights(s.model), full_weights);

    Rig other;
    TrainerConfig d = config(kSteps, 1);
    d.fp8_recipe =
        recipe.granularity == amp::Fp8Granularity::kNvfp4 ? amp::Fp8Recipe::mxfp4() : amp::Fp8Recipe::nvfp4();
    Trainer refused(d, other.model, other.task(), other.adam, other.train);
    const absl::Status status = refused.restore(*loaded, path);
    EXPECT_NE(std::string(status.message()).find("written with the FP8 recipe " + recipe.str()), std::string::npos)
        << status;
  }
}

TEST(TrainerFp8Test, AModelWithoutAnFp8CapableLinearIsAnError) {
  Rig s({30});  // 16 -> 30 -> 4: no layer with both features multiples of 16
  try {
    Trainer trainer({.precision = Precision::kFp8, .max_steps = 1}, s.model, s.task(), s.adam, s.train);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no linear of the model can run in FP8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mantissa
