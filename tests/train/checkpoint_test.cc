// Checkpoints: bit-exact round trips of every field, the error for each kind of bad file, check_compatible,
// atomic replacement, CheckpointDir (keep K, latest) and resolve_resume, and reading a checkpoint with h5py.
#include "train/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>

#include "models/cnn.h"
#include "optim/sgd.h"
#include "tests/train/checkpoint_support.h"
#include "train/checkpoint_file.h"

namespace mantissa {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::Reseal;
using testing::ScratchDir;
using testing::SmallRun;
using ::testing::StartsWith;

TEST(Checkpoint, RoundTripOfATrainedCnnWithAdamIsBitExact) {
  Generator init(3);
  CNN model({.generator = &init});
  Adam opt(model.named_parameters(), {.lr = 1e-3, .amsgrad = true});
  // Two training steps: Adam has moments and step counts, batch norm has running statistics and counts.
  testing::train_steps(
      opt, [&](const Tensor& x) { return model.forward(x); }, {2, 1, 28, 28}, 10, 2);
  const Checkpoint saved = testing::make_checkpoint(model, opt);
  ASSERT_EQ(saved.buffers.size(), 6u);
  ASSERT_EQ(saved.optimizer.tensors.size(), 4 * saved.model.size());  // step, exp_avg, exp_avg_sq, max_exp_avg_sq
  EXPECT_EQ(saved.buffers[2].name, "bn1.num_batches_tracked");
  EXPECT_EQ(saved.buffers[2].tensor.item<int64_t>(), 2);  // two training forwards

  ScratchDir dir;
  const std::string path = dir.file("step_2.h5");
  ASSERT_TRUE(save_checkpoint(path, saved).ok());
  const absl::StatusOr<Checkpoint> loaded = load_checkpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  testing::expect_same_checkpoint(saved, *loaded);
  EXPECT_EQ(loaded->meta.library_version, "0.1.0");  // the project version from CMake
  EXPECT_TRUE(std::regex_match(loaded->meta.created, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << loaded->meta.created;
  EXPECT_TRUE(check_compatible(path, *loaded, model, opt).ok());
  // And the loaded state really restores: a fresh model and optimizer take it without complaint.
  Generator other(99);
  CNN fresh({.generator = &other});
  Adam fresh_opt(fresh.named_parameters(), {.lr = 1e-3, .amsgrad = true});
  std::vector<NamedTensor> state = loaded->model;
  state.insert(state.end(), loaded->buffers.begin(), loaded->buffers.end());
  fresh.load_state_dict(state);
  fresh_opt.load_state_dict(loaded->optimizer);
  EXPECT_TRUE(testing::same_bytes(fresh.fc2->weight, model.fc2->weight));
}

TEST(Checkpoint, EveryDtypeShapeAndOptionalPartRoundTrips) {
  Checkpoint c;
  c.model = {{"w", from_vector<float>({1.5f, -0.0f, 3e-39f, 7.0f}, {2, 2})},
             {"scalar", scalar_tensor(0.1)},
             {"empty", zeros({0, 3})}};
  c.buffers = {{"half", from_vector<float>({1.0f, 65504.0f, 6e-8f}, {3}, {.dtype = DType::kF16})},
               {"brain", from_vector<float>({-2.5f, 1e30f}, {1, 2}, {.dtype = DType::kBF16})},
               {"flags", from_vector<bool>({true, false, true}, {3})},
               {"counts", from_vector<int32_t>({-7, 1 << 30}, {2})},
               {"e4m3", from_vector<float>({448.0f, -0.001953125f, 0.3f}, {3}).to(DType::kF8E4M3)},
               {"e5m2", from_vector<float>({57344.0f, 1.5e-5f, -1e9f}, {1, 3}).to(DType::kF8E5M2)},
               {"count", scalar_tensor(5, {.dtype = DType::kI64})},
               {"f64", from_vector<double>({0.1, 1e-300}, {2})},
               {"view", from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).t()}};  // non-contiguous: stored as [3, 2]
  c.optimizer.optimizer = "SGD";
  c.meta.precision = "fp16";
  c.meta.created = "2020-01-02T03:04:05Z";
  ScratchDir dir;
  const std::string path = dir.file("all.h5");
  ASSERT_TRUE(save_checkpoint(path, c).ok());
  const absl::StatusOr<Checkpoint> loaded = load_checkpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  testing::expect_same_checkpoint(c, *loaded);
  EXPECT_TRUE(loaded->fp8.empty());            // no /fp8 group without FP8
  EXPECT_FALSE(loaded->schedule.has_value());  // no /schedule group without a schedule
  EXPECT_TRUE(loaded->scaler.empty());         // a disabled scaler saves nothing
  EXPECT_EQ(loaded->meta.created, "2020-01-02T03:04:05Z");
}

// FP8 scaling state: paths of any depth become groups under /fp8 and come back in the order saved.
TEST(Checkpoint, Fp8StateRoundTripsAsNestedGroups) {
  Checkpoint c;
  c.model = {{"fc.weight", zeros({16, 16})}};
  c.optimizer.optimizer = "SGD";
  c.fp8.recipe = "delayed(history=4, amax=max, margin=0)";
  c.fp8.tensors = {{"fc.weight/input/amax_history", from_vector<float>({1.5f, 0.0f, 3.0f, 2.0f}, {4})},
                   {"fc.weight/input/scale", scalar_tensor(298.5, {.dtype = DType::kF32})},
                   {"fc.weight/grad_output/amax_history", from_vector<float>({1e-6f, 0, 0, 0}, {4})},
                   {"fc.weight/grad_output/overflow", scalar_tensor(3, {.dtype = DType::kI64})},
                   {"steps", scalar_tensor(7, {.dtype = DType::kI64})}};
  ScratchDir dir;
  const std::string path = dir.file("fp8.h5");
  ASSERT_TRUE(save_checkpoint(path, c).ok());
  const absl::StatusOr<Checkpoint> loaded = load_checkpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  testing::expect_same_checkpoint(c, *loaded);
  // A bad part anywhere in a path is refused, naming the group it would go under.
  c.fp8.tensors.push_back({"fc.weight//scale", zeros({1})});
  const absl::Status s = save_checkpoint(dir.file("bad.h5"), c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("under /fp8/fc.weight"));
}

TEST(Checkpoint, BadNamesAndUndefinedTensorsAreRefusedAndLeaveNoFile) {
  ScratchDir dir;
  const std::string path = dir.file("x.h5");
  for (const std::string& name : {std::string("a/b"), std::string(""), std::string(".")}) {
    Checkpoint c;
    c.model = {{name, zeros({2})}};
    const absl::Status s = save_checkpoint(path, c);
    EXPECT_FALSE(s.ok()) << "'" << name << "'";
    EXPECT_THAT(std::string(s.message()), StartsWith(path + ": cannot store '" + name + "' under /model"));
  }
  Checkpoint c;
  c.buffers = {{"b", Tensor()}};
  EXPECT_THAT(std::string(save_checkpoint(path, c).message()), HasSubstr("/buffers/b: the tensor is undefined"));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path)) << "neither the target nor a temporary file may remain";
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousFileUntouched) {
  SmallRun run;
  ScratchDir dir;
  const std::string path = dir.file("step_2.h5");
  ASSERT_TRUE(save_checkpoint(path, run.checkpoint()).ok());
  const std::string before = testing::read_bytes(path);
  Checkpoint bad = run.checkpoint();
  bad.optimizer.tensors["no_slash"] = zeros({1});
  EXPECT_THAT(std::string(save_checkpoint(path, bad).message()),
              HasSubstr("optimizer state entry 'no_slash' is not '<param name>/<state name>'"));
  EXPECT_EQ(testing::read_bytes(path), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 1) << "the temporary file remains";
  EXPECT_TRUE(load_checkpoint(path).ok());
}

TEST(CheckpointDir, AFailedWriteSaysWhatIsKeptAfterCheckingIt) {
  SmallRun run;
  ScratchDir dir;
  CheckpointDir folder(dir.path);
  Checkpoint bad = run.checkpoint();
  bad.trainer.step = 1;
  bad.optimizer.tensors["no_slash"] = zeros({1});
  absl::StatusOr<std::string> first = folder.write(bad);
  ASSERT_FALSE(first.ok());
  EXPECT_THAT(std::string(first.status().message()),
              HasSubstr("No earlier checkpoint is in " + dir.path + ", and no partial file is left"));

  Checkpoint good = run.checkpoint();
  good.trainer.step = 2;
  ASSERT_TRUE(folder.write(good).ok());
  bad.trainer.step = 3;
  absl::StatusOr<std::string> third = folder.write(bad);
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(std::string(third.status().message()),
              AllOf(HasSubstr("is not '<param name>/<state name>'"),
                    HasSubstr("Nothing is lost: " + dir.path + "/latest still names step_2.h5, which is intact ("),
                    HasSubstr("checksum verified), and no partial file is left")));
  EXPECT_EQ(*folder.latest(), dir.file("step_2.h5"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 2) << "step_2.h5 and latest only";
}

TEST(CheckpointFile, OperatingSystemErrorsInWordsWithACodeToActOn) {
  EXPECT_TRUE(absl::IsResourceExhausted(checkpoint_file::os_error("f", ENOSPC)));
  EXPECT_TRUE(absl::IsResourceExhausted(checkpoint_file::os_error("f", EDQUOT)));
  EXPECT_TRUE(absl::IsPermissionDenied(checkpoint_file::os_error("f", EACCES)));
  EXPECT_TRUE(absl::IsInternal(checkpoint_file::os_error("f", EIO)));
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  const absl::Status full = checkpoint_file::write_text("/dev/full", "step_2.h5\n");
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_EQ(full.message(), "/dev/full: cannot write: No space left on device");
}

// ---- bad files ----

std::string load_error(const std::string& path) {
  const absl::StatusOr<Checkpoint> c = load_checkpoint(path);
  EXPECT_FALSE(c.ok()) << path << " loaded";
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(CheckpointBadFile, MissingNotHdf5AndForeignHdf5) {
  ScratchDir dir;
  EXPECT_EQ(load_error(dir.file("nope.h5")), dir.file("nope.h5") + ": no such file");
  EXPECT_EQ(load_checkpoint(dir.file("nope.h5")).status().code(), absl::StatusCode::kNotFound);
  testing::write_bytes(dir.file("text.h5"), "step,loss\n1,2.3\n");
  EXPECT_EQ(load_error(dir.file("text.h5")), dir.file("text.h5") + ": not an HDF5 file");
  testing::write_bytes(dir.file("big_text.h5"), std::string(4000, 'x'));
  EXPECT_EQ(load_error(dir.file("big_text.h5")), dir.file("big_text.h5") + ": not an HDF5 file");
  EXPECT_EQ(load_error(dir.path), dir.path + ": not a regular file");
  // An HDF5 file that some other program wrote.
  const std::string foreign = dir.file("foreign.h5");
  const hid_t f = H5Fcreate(foreign.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  H5Fclose(f);
  EXPECT_THAT(load_error(foreign), StartsWith(foreign + ": an HDF5 file but not a mantissa checkpoint"));
  EXPECT_FALSE(reseal_checkpoint(foreign).ok()) << "sealing would overwrite its superblock";
}

TEST(CheckpointBadFile, TruncatedAtAnyLength) {
  SmallRun run;
  ScratchDir dir;
  const std::string path = dir.file("step_2.h5");
  ASSERT_TRUE(save_checkpoint(path, run.checkpoint()).ok());
  const std::string bytes = testing::read_bytes(path);
  const std::string cut = dir.file("cut.h5");
  for (size_t n : {size_t{0}, size_t{10}, size_t{511}, size_t{512}, size_t{513}, size_t{2048}, bytes.size() / 2,
                   bytes.size() - 100, bytes.size() - 1}) {
    testing::write_bytes(cut, bytes.substr(0, n));
    const std::string msg = load_error(cut);
    EXPECT_THAT(msg, StartsWith(cut + ": truncated: " + std::to_string(n) + " bytes")) << n;
  }
  testing::write_bytes(cut, bytes + "extra");
  EXPECT_THAT(load_error(cut), StartsWith(cut + ": corrupt: " + std::to_string(bytes.size() + 5) + " bytes"));
}

TEST(CheckpointBadFile, AFlippedByteAnywhereIsCaught) {
  SmallRun run;
  ScratchDir dir;
  const std::string path = dir.file("step_2.h5");
  const Checkpoint saved = run.checkpoint();
  ASSERT_TRUE(save_checkpoint(path, saved).ok());
  const std::string bytes = testing::read_bytes(path);
  const std::string bad = dir.file("flipped.h5");
  int errors = 0, tries = 0;
  for (size_t at = 0; at < bytes.size(); at += (at < 600 ? 7 : 97)) {  // the header densely, the rest sampled
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ (1 << (at % 8)));
    testing::write_bytes(bad, b);
    const absl::StatusOr<Checkpoint> c = load_checkpoint(bad);
    ++tries;
    if (!c.ok()) {
      ++errors;
      EXPECT_THAT(std::string(c.status().message()), StartsWith(bad + ": ")) << at;
    } else {
      testing::expect_same_checkpoint(saved, *c);  // accepted only if nothing that matters changed
    }
  }
  EXPECT_EQ(errors, tries) << "the seal covers every byte: a flip is always an error";
  // The message for a flip in the data says what happened.
  std::string b = bytes;
  b[bytes.size() - 20] ^= 1;
  testing::write_bytes(bad, b);
  EXPECT_THAT(load_error(bad), StartsWith(bad + ": corrupt: the CRC-32 of its contents is "));
  b = bytes;
  b[30] ^= 1;
  testing::write_bytes(bad, b);
  EXPECT_EQ(load_error(bad), bad + ": corrupt checkpoint header (its first 512 bytes)");
}

TEST(CheckpointBadFile, NewerFormatVersion) {
  SmallRun run;
  ScratchDir dir;
  Checkpoint c = run.checkpoint();
  c.meta.format_version = 2;
  const std::string path = dir.file("future.h5");
  ASSERT_TRUE(save_checkpoint(path, c).ok());
  const absl::StatusOr<Checkpoint> loaded = load_checkpoint(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(loaded.status().message()),
              StartsWith(path + ": format version 2 is newer than this library's 1 (written by mantissa 0.1.0)"));
}

// A structurally wrong file with a valid seal (an edit by another tool, resealed): each gives its message.
class CheckpointStructure : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(save_checkpoint(path, run.checkpoint()).ok()); }
  std::string after(const std::function<void(hid_t)>& edit) {
    testing::edit_with_hdf5(path, edit);
    return load_error(path);
  }
  SmallRun run;
  ScratchDir dir;
  const std::string path = dir.file("step_2.h5");
};

TEST_F(CheckpointStructure, MissingGroup) {
  EXPECT_EQ(after([](hid_t f) { H5Ldelete(f, "/optimizer/groups", H5P_DEFAULT); }),
            path + ": /optimizer has no group 'groups'");
}
TEST_F(CheckpointStructure, MissingTopLevelGroup) {
  EXPECT_EQ(after([](hid_t f) { H5Ldelete(f, "/trainer", H5P_DEFAULT); }), path + ": / has no group 'trainer'");
}
TEST_F(CheckpointStructure, MissingAttribute) {
  EXPECT_EQ(after([](hid_t f) { H5Adelete_by_name(f, "/trainer", "epoch", H5P_DEFAULT); }),
            path + ": /trainer has no attribute 'epoch'");
}
// The global batch's make-up (issue 34): files written before it have none of its three attributes and load
// without it (restore() then takes the resuming run's); one without the others, or below 1, is an error.
TEST_F(CheckpointStructure, AFileWithoutTheGlobalBatchLoadsWithoutIt) {
  const absl::StatusOr<Checkpoint> with = load_checkpoint(path);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->trainer.global_batch, (GlobalBatch{.world_size = 3, .batch_size = 16, .grad_accum = 2}));
  testing::edit_with_hdf5(path, [](hid_t f) {
    for (const char* name : {"world_size", "batch_size", "grad_accum"})
      H5Adelete_by_name(f, "/trainer", name, H5P_DEFAULT);
  });
  const absl::StatusOr<Checkpoint> old = load_checkpoint(path);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(old->trainer.global_batch.has_value());
  EXPECT_EQ(old->trainer.step, 2);
  EXPECT_EQ(old->trainer.batch, 3);
}
TEST_F(CheckpointStructure, PartOfTheGlobalBatch) {
  EXPECT_EQ(after([](hid_t f) { H5Adelete_by_name(f, "/trainer", "grad_accum", H5P_DEFAULT); }),
            path + ": /trainer has no attribute 'grad_accum'");
}
TEST_F(CheckpointStructure, AGlobalBatchOfNoRanks) {
  EXPECT_EQ(after([](hid_t f) {
              H5Adelete_by_name(f, "/trainer", "world_size", H5P_DEFAULT);
              const hid_t space = H5Screate(H5S_SCALAR);
              const hid_t a = H5Acreate_by_name(f, "/trainer", "world_size", H5T_STD_I64LE, space, H5P_DEFAULT,
                                                H5P_DEFAULT, H5P_DEFAULT);
              const int64_t v = 0;
              H5Awrite(a, H5T_NATIVE_INT64, &v);
              H5Aclose(a);
              H5Sclose(space);
            }),
            path + ": /trainer attribute 'world_size' is 0, expected >= 1");
}
TEST(Checkpoint, AGlobalBatchWithAFactorBelowOneIsNotWritten) {
  SmallRun run;
  ScratchDir dir;
  Checkpoint c = run.checkpoint();
  c.trainer.global_batch->batch_size = 0;
  const std::string path = dir.file("step_2.h5");
  const absl::Status s = save_checkpoint(path, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("the global batch 3 ranks x 0 per rank x grad_accum 2 has a factor below 1"));
  EXPECT_FALSE(std::filesystem::exists(path));
}
TEST_F(CheckpointStructure, MissingDataset) {
  EXPECT_EQ(after([](hid_t f) { H5Ldelete(f, "/optimizer/groups/0/params", H5P_DEFAULT); }),
            path + ": /optimizer/groups/0 has no dataset 'params'");
}
TEST_F(CheckpointStructure, AttributeOfTheWrongType) {
  EXPECT_EQ(after([](hid_t f) {
              H5Adelete_by_name(f, "/trainer", "step", H5P_DEFAULT);
              const hid_t space = H5Screate(H5S_SCALAR);
              const double v = 2.0;
              const hid_t a = H5Acreate_by_name(f, "/trainer", "step", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                                H5P_DEFAULT);
              H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
              H5Aclose(a);
              H5Sclose(space);
            }),
            path + ": /trainer attribute 'step' is not an integer");
}
TEST_F(CheckpointStructure, StateTensorOfTheWrongShape) {
  EXPECT_EQ(after([](hid_t f) {
              H5Ldelete(f, "/optimizer/state/layers.0.weight/exp_avg", H5P_DEFAULT);
              const hsize_t dims[1] = {3};
              const hid_t space = H5Screate_simple(1, dims, nullptr);
              const hid_t d = H5Dcreate2(f, "/optimizer/state/layers.0.weight/exp_avg", H5T_IEEE_F32LE, space,
                                         H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
              const float v[3] = {1, 2, 3};
              H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
              H5Dclose(d);
              H5Sclose(space);
            }),
            path + ": /optimizer/state/layers.0.weight/exp_avg has shape [3], /model/layers.0.weight has [8, 4]");
}
TEST_F(CheckpointStructure, UnsupportedTensorType) {
  EXPECT_THAT(after([](hid_t f) {
                H5Ldelete(f, "/model/layers.0.bias", H5P_DEFAULT);
                const hsize_t dims[1] = {8};
                const hid_t space = H5Screate_simple(1, dims, nullptr);
                const hid_t d =
                    H5Dcreate2(f, "/model/layers.0.bias", H5T_STD_U32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                H5Dclose(d);
                H5Sclose(space);
              }),
              StartsWith(path + ": /model/layers.0.bias has an unsupported type"));
}
TEST_F(CheckpointStructure, BadGeneratorState) {
  EXPECT_EQ(after([](hid_t f) {
              H5Adelete_by_name(f, "/trainer/generators/data", "index", H5P_DEFAULT);
              const hid_t space = H5Screate(H5S_SCALAR);
              const hid_t a = H5Acreate_by_name(f, "/trainer/generators/data", "index", H5T_STD_U32LE, space,
                                                H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
              const uint32_t v = 9;
              H5Awrite(a, H5T_NATIVE_UINT32, &v);
              H5Aclose(a);
              H5Sclose(space);
            }),
            path +
                ": /trainer/generators/data has index 9 with counter 1; expected index 4, or 0..3 with "
                "counter >= 1");
}
TEST_F(CheckpointStructure, SoftAndExternalLinksAreRefused) {
  EXPECT_EQ(after([](hid_t f) { H5Lcreate_soft("/model/layers.0.bias", f, "/model/alias", H5P_DEFAULT, H5P_DEFAULT); }),
            path + ": /model/alias is a soft or external link, not an object of the checkpoint");
}
TEST_F(CheckpointStructure, ExternalLinkInPlaceOfAGroup) {
  EXPECT_EQ(after([](hid_t f) {
              H5Ldelete(f, "/data", H5P_DEFAULT);
              H5Lcreate_external("/etc/other.h5", "/data", f, "/data", H5P_DEFAULT, H5P_DEFAULT);
            }),
            path + ": / has no group 'data'");
}
TEST_F(CheckpointStructure, AnEditWithoutResealIsCorruption) {
  testing::edit_with_hdf5(
      path, [](hid_t f) { H5Adelete_by_name(f, "/trainer", "epoch", H5P_DEFAULT); }, Reseal::kNo);
  EXPECT_THAT(load_error(path), HasSubstr("needs reseal_checkpoint"));
}

// ---- compatibility with the run ----

TEST(CheckpointCompatible, ShapeNamesDtypeOptimizerKindAndGroups) {
  SmallRun run;
  const Checkpoint c = run.checkpoint();
  const std::string path = "runs/a/step_400.h5";
  EXPECT_TRUE(check_compatible(path, c, run.model, run.opt).ok());

  Generator g(1);
  MLP wider(4, {16}, 3, {.generator = &g});
  Adam wider_opt(wider.named_parameters());
  EXPECT_EQ(check_compatible(path, c, wider, wider_opt).message(),
            "runs/a/step_400.h5: /model/layers.0.weight has shape [8, 4], the model expects [16, 4]");
  MLP deeper(4, {8, 8}, 3, {.generator = &g});
  Adam deeper_opt(deeper.named_parameters());
  EXPECT_EQ(check_compatible(path, c, deeper, deeper_opt).message(),
            "runs/a/step_400.h5: /model/layers.2.weight has shape [3, 8], the model expects [8, 8]");
  MLP f64(4, {8}, 3, {.dtype = DType::kF64, .generator = &g});
  Adam f64_opt(f64.named_parameters());
  EXPECT_EQ(check_compatible(path, c, f64, f64_opt).message(),
            "runs/a/step_400.h5: /model/layers.0.weight is f32, the model expects f64");
  Checkpoint extra = c;
  extra.model.push_back({"head.weight", zeros({2})});
  EXPECT_EQ(check_compatible(path, extra, run.model, run.opt).message(),
            "runs/a/step_400.h5: /model/head.weight is not a parameter of the model");
  Generator g2(2);
  CNN cnn({.generator = &g2});
  Adam cnn_opt(cnn.named_parameters());
  EXPECT_THAT(std::string(check_compatible(path, c, cnn, cnn_opt).message()),
              StartsWith("runs/a/step_400.h5: /model has no 'conv1.weight', a parameter of the model"));

  SGD sgd(run.model.named_parameters(), {.lr = 0.1});
  const absl::Status kind = check_compatible(path, c, run.model, sgd);
  EXPECT_EQ(kind.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kind.message(), "runs/a/step_400.h5: /optimizer holds the state of a 'Adam' optimizer, the run uses 'SGD'");

  const std::vector<NamedTensor> params = run.model.named_parameters();
  Adam split({params[0], params[1]});
  split.add_param_group({params[2], params[3]}, {});
  EXPECT_EQ(check_compatible(path, c, run.model, split).message(),
            "runs/a/step_400.h5: /optimizer has 1 param groups, the run's optimizer has 2");
  Checkpoint no_lr = c;
  no_lr.optimizer.groups[0].hyperparameters.erase("lr");
  EXPECT_EQ(check_compatible(path, no_lr, run.model, run.opt).message(),
            "runs/a/step_400.h5: /optimizer/groups/0 has no attribute 'lr'");
  Checkpoint renamed = c;
  renamed.optimizer.groups[0].params[1] = "other";
  EXPECT_EQ(check_compatible(path, renamed, run.model, run.opt).message(),
            "runs/a/step_400.h5: /optimizer/groups/0 has parameters [layers.0.weight, other, layers.2.weight, "
            "layers.2.bias], the run's optimizer has [layers.0.weight, layers.0.bias, layers.2.weight, layers.2.bias]");
}

// ---- the folder ----

TEST(CheckpointDir, KeepsTheNewestByStepNumberAndPointsLatestAtTheLastWritten) {
  SmallRun run;
  ScratchDir scratch;
  const std::string root = scratch.file("runs/a");  // created by write(), parents included
  CheckpointDir dir(root, 3);
  EXPECT_THAT(std::string(dir.latest().status().message()), HasSubstr("no checkpoint written in"));
  Checkpoint c = run.checkpoint();
  for (int64_t step : {2, 9, 10, 11, 100}) {  // lexicographic order would call step_100 the oldest
    c.trainer.step = step;
    const absl::StatusOr<std::string> written = dir.write(c);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(*written, root + "/step_" + std::to_string(step) + ".h5");
    EXPECT_EQ(*dir.latest(), *written);
  }
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(root)) names.push_back(e.path().filename().string());
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("step_10.h5", "step_11.h5", "step_100.h5", "latest"));
  EXPECT_EQ(testing::read_bytes(root + "/latest"), "step_100.h5\n");
  const absl::StatusOr<Checkpoint> latest = load_checkpoint(*dir.latest());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->trainer.step, 100);

  // A run resumed from an older checkpoint writes a lower step: that file is kept and is `latest`.
  c.trainer.step = 3;
  ASSERT_TRUE(dir.write(c).ok());
  EXPECT_EQ(*dir.latest(), root + "/step_3.h5");
  EXPECT_TRUE(std::filesystem::exists(root + "/step_3.h5"));
  EXPECT_FALSE(std::filesystem::exists(root + "/step_10.h5"));

  // A temporary file of a writer that died is cleaned up; `latest` naming a missing file is an error.
  testing::write_bytes(root + "/.step_7.h5.tmp.999999999", "half");
  ASSERT_TRUE(dir.write(c).ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/.step_7.h5.tmp.999999999"));
  std::filesystem::remove(root + "/step_3.h5");
  EXPECT_EQ(dir.latest().status().message(), root + "/latest: names step_3.h5, which does not exist in " + root);
}

TEST(CheckpointDir, ResolveResume) {
  SmallRun run;
  ScratchDir scratch;
  CheckpointDir dir(scratch.path);
  Checkpoint c = run.checkpoint();
  c.trainer.step = 40;
  ASSERT_TRUE(dir.write(c).ok());
  EXPECT_EQ(*resolve_resume("latest", scratch.path), scratch.file("step_40.h5"));
  EXPECT_EQ(*resolve_resume(scratch.file("step_40.h5"), ""), scratch.file("step_40.h5"));
  EXPECT_EQ(resolve_resume(scratch.file("step_41.h5"), scratch.path).status().message(),
            scratch.file("step_41.h5") + ": no such file");
  EXPECT_FALSE(resolve_resume("latest", "").ok());
  EXPECT_FALSE(resolve_resume("latest", scratch.file("empty")).ok());
}

// ---- interop ----

TEST(CheckpointInterop, H5pyReadsTheWeightsUnderTheirNames) {
  if (std::system("/usr/bin/python3 -c 'import h5py' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3-h5py is not installed (/usr/bin/python3 -c 'import h5py' failed)";
  SmallRun run;
  ScratchDir dir;
  const std::string path = dir.file("step_2.h5");
  ASSERT_TRUE(save_checkpoint(path, run.checkpoint()).ok());
  const std::string script =
      "import h5py, sys\n"
      "f = h5py.File(sys.argv[1], 'r')\n"
      "print('format_version', int(f['meta'].attrs['format_version']))\n"
      "for k in f['model']:\n"
      "    d = f['model'][k]\n"
      "    print(k, d.dtype, list(d.shape), repr(float(d[()].ravel()[0])))\n";
  testing::write_bytes(dir.file("read.py"), script);
  FILE* p = ::popen(("/usr/bin/python3 " + dir.file("read.py") + " " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ASSERT_EQ(::pclose(p), 0) << out;
  // "<name> <dtype> <shape> <first value>" per dataset, in any order; the value compared exactly.
  std::map<std::string, double> got;
  std::istringstream lines(out);
  std::string first_line;
  std::getline(lines, first_line);
  EXPECT_EQ(first_line, "format_version 1");
  for (std::string line; std::getline(lines, line);) {
    const size_t last = line.rfind(' ');
    ASSERT_NE(last, std::string::npos) << out;
    got[line.substr(0, last)] = std::strtod(line.c_str() + last + 1, nullptr);
  }
  std::map<std::string, double> want;
  for (const auto& [name, t] : run.model.named_parameters())
    want[name + " float32 " + shape_str(t.shape())] = static_cast<double>(t.data<float>()[0]);
  EXPECT_EQ(got, want) << out;
}

}  // namespace
}  // namespace mantissa
