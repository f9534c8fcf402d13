// Shared by the checkpoint tests: a scratch folder, a checkpoint built from a really trained model and
// optimizer with every field non-trivial, bit-exact comparison, and in-place edits of a file with HDF5.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <hdf5.h>
#include <sstream>
#include <stdlib.h>
#include <string>

#include "amp/grad_scaler.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/loss/loss.h"
#include "optim/adam.h"
#include "train/checkpoint.h"
#include "train/checkpoint_file.h"

namespace mantissa::testing {

// A fresh folder under the test temp dir, removed with everything in it at the end of the test.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "mantissa_ckpt_XXXXXX").string();
    path = ::mkdtemp(tmpl.data()) ? tmpl : "";
    EXPECT_FALSE(path.empty()) << "mkdtemp failed";
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (std::filesystem::path(path) / name).string(); }
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// `steps` optimizer steps of a model (`forward` of x with `x_shape`) on random batches, cross-entropy.
inline void train_steps(Optimizer& opt, const std::function<Tensor(const Tensor&)>& forward, const Shape& x_shape,
                        int64_t classes, int steps) {
  Generator g(7);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    const Tensor x = randn(x_shape, {}, &g);
    std::vector<int64_t> y;
    for (int64_t i = 0; i < x_shape[0]; ++i) y.push_back(i % classes);
    cross_entropy(forward(x), from_vector<int64_t>(y)).backward();
    opt.step();
  }
}

// Everything a run saves, from `model` and `opt` as they stand, with non-default values in every other field.
inline Checkpoint make_checkpoint(const Module& model, const Optimizer& opt) {
  Checkpoint c;
  for (const auto& [name, t] : model.named_parameters()) c.model.push_back({name, t.detach().clone()});
  for (const auto& [name, t] : model.named_buffers()) c.buffers.push_back({name, t.detach().clone()});
  c.optimizer = opt.state_dict();
  c.schedule = LRSchedulerState{.step = 2, .base_lrs = std::vector<double>(opt.num_param_groups(), 3e-4)};
  amp::GradScaler scaler(
      {.init_scale = 1024.0, .hysteresis = 2, .hysteresis_refill = amp::HysteresisRefill::kOnGrowth});
  c.scaler = scaler.state_dict();
  c.scaler["_growth_tracker"] = 1;
  c.scaler["_hysteresis_overflows"] = 1;
  Generator data(11), dropout(12);
  data.next_u32();  // index 1 within block 1: a mid-block state
  for (int i = 0; i < 9; ++i) dropout.next_u64();
  c.trainer = {.step = 2,
               .epoch = 1,
               .batch = 3,
               .generators = {{"data", data.state()}, {"dropout", dropout.state()}, {"fresh", Generator(3).state()}},
               .global_batch = GlobalBatch{.world_size = 3, .batch_size = 16, .grad_accum = 2}};
  c.data = {{"vocab", std::string("ab\0c\xce\xbb\n", 7)}, {"empty", ""}, {"trailing_nuls", std::string("x\0\0", 3)}};
  c.meta = {.precision = "bf16", .config_json = R"({"model": "mlp", "lr": 0.0003, "note": "caf\u00e9"})"};
  return c;
}

// A small trained MLP (4 -> 8 -> 3) with Adam after two steps, as a checkpoint.
struct SmallRun {
  Generator init{5};
  MLP model{4, {8}, 3, {.generator = &init}};
  Adam opt{model.named_parameters(), {.lr = 1e-2, .weight_decay = 0.1}};
  SmallRun() {
    train_steps(
        opt, [&](const Tensor& x) { return model.forward(x); }, {6, 4}, 3, 2);
  }
  Checkpoint checkpoint() const { return make_checkpoint(model, opt); }
};

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

inline void expect_same_tensors(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b,
                                const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << what << " #" << i << " (order must be kept)";
    EXPECT_TRUE(same_bytes(a[i].tensor, b[i].tensor)) << what << " " << a[i].name;
  }
}

// Every field equal, tensors bit for bit; `saved` has empty library_version and created (filled on save).
inline void expect_same_checkpoint(const Checkpoint& saved, const Checkpoint& loaded) {
  expect_same_tensors(saved.model, loaded.model, "model");
  expect_same_tensors(saved.buffers, loaded.buffers, "buffers");
  EXPECT_EQ(saved.optimizer.optimizer, loaded.optimizer.optimizer);
  ASSERT_EQ(saved.optimizer.groups.size(), loaded.optimizer.groups.size());
  for (size_t g = 0; g < saved.optimizer.groups.size(); ++g) {
    EXPECT_EQ(saved.optimizer.groups[g].params, loaded.optimizer.groups[g].params);
    EXPECT_EQ(saved.optimizer.groups[g].hyperparameters, loaded.optimizer.groups[g].hyperparameters);
  }
  ASSERT_EQ(saved.optimizer.tensors.size(), loaded.optimizer.tensors.size());
  for (const auto& [key, t] : saved.optimizer.tensors) {
    ASSERT_TRUE(loaded.optimizer.tensors.count(key)) << key;
    EXPECT_TRUE(same_bytes(t, loaded.optimizer.tensors.at(key))) << key;
  }
  ASSERT_EQ(saved.schedule.has_value(), loaded.schedule.has_value());
  if (saved.schedule) {
    EXPECT_EQ(saved.schedule->step, loaded.schedule->step);
    EXPECT_EQ(saved.schedule->base_lrs, loaded.schedule->base_lrs);
  }
  EXPECT_EQ(saved.scaler, loaded.scaler);
  EXPECT_EQ(saved.fp8.recipe, loaded.fp8.recipe);
  expect_same_tensors(saved.fp8.tensors, loaded.fp8.tensors, "fp8");
  EXPECT_EQ(saved.trainer.step, loaded.trainer.step);
  EXPECT_EQ(saved.trainer.epoch, loaded.trainer.epoch);
  EXPECT_EQ(saved.trainer.batch, loaded.trainer.batch);
  EXPECT_EQ(saved.trainer.generators, loaded.trainer.generators);
  EXPECT_EQ(saved.trainer.global_batch, loaded.trainer.global_batch);
  EXPECT_EQ(saved.data, loaded.data);
  EXPECT_EQ(saved.meta.format_version, loaded.meta.format_version);
  EXPECT_EQ(saved.meta.precision, loaded.meta.precision);
  EXPECT_EQ(saved.meta.config_json, loaded.meta.config_json);
}

// Opens `path` read-write with HDF5, runs `edit` on the file id, closes it and, unless told otherwise,
// reseals it (as a deliberate edit by another tool would be).
enum class Reseal { kYes, kNo };
inline void edit_with_hdf5(const std::string& path, const std::function<void(hid_t)>& edit,
                           Reseal reseal = Reseal::kYes) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  edit(f);
  ASSERT_GE(H5Fclose(f), 0);
  if (reseal == Reseal::kYes) {
    ASSERT_TRUE(reseal_checkpoint(path).ok());
  }
}

}  // namespace mantissa::testing
