// A training checkpoint as plain data, and its HDF5 file: written atomically (temporary file, fsync,
// rename, fsync of the folder), read back with every structural check done before anything is returned.
// The Trainer turns itself into a Checkpoint and back (train/trainer.h); this file knows nothing of it.
//
// File layout (h5dump -H shows it; names are PyTorch's state_dict names):
//   /model/<dotted name>        fp32 master parameters
//   /buffers/<dotted name>      batch-norm running statistics, num_batches_tracked (any dtype)
//   /optimizer                  type, param groups (names, hyperparameters), per-parameter state tensors
//   /schedule                   step and base lrs (absent without a schedule)
//   /scaler                     the GradScalerState numbers (empty group when the scaler is disabled)
//   /trainer                    global step, epoch, batch within the epoch, RNG states, the global batch's
//                               make-up (world size, batch per rank, grad_accum; absent in older files)
//   /data/<name>                text blobs, e.g. the vocabulary of a text model
//   /meta                       format version, library version, precision, config JSON, creation time,
//                               wall time of the run so far (absent in older files: 0)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/grad_scaler.h"
#include "framework/generator.h"
#include "framework/module.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace mantissa {

inline constexpr int64_t kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  int64_t format_version = kCheckpointFormatVersion;
  std::string library_version;  // filled in by save_checkpoint when empty
  std::string precision;        // "fp32", "fp16" or "bf16"
  std::string config_json;      // the run's whole configuration
  std::string created;          // ISO 8601 UTC; filled in by save_checkpoint when empty
  double wall_s = 0.0;          // the run's wall time up to this checkpoint, its parts before resumes included
};

// The global batch of one optimizer step as the run that wrote a checkpoint made it: world_size ranks, each
// taking batch_size samples per micro-batch, grad_accum micro-batches per step. A run resumed on another
// number of ranks keeps samples() and splits it anew (train/trainer.h).
struct GlobalBatch {
  int64_t world_size = 1;
  int64_t batch_size = 1;  // per rank and micro-batch: the training loader's batch size
  int64_t grad_accum = 1;
  int64_t samples() const { return world_size * batch_size * grad_accum; }
  // The samples of one micro-batch over all ranks: the unit of TrainerProgress::batch.
  int64_t micro_batch_samples() const { return world_size * batch_size; }
  friend bool operator==(const GlobalBatch&, const GlobalBatch&) = default;
};

// Where the run stands: written only at a step boundary.
struct TrainerProgress {
  int64_t step = 0;   // optimizer steps taken since the start of the run (skipped ones included)
  int64_t epoch = 0;  // the loader position: the next batch is `batch` of `epoch` (each rank's batch index)
  int64_t batch = 0;
  std::map<std::string, GeneratorState> generators;  // every RNG the run draws from, e.g. "default"
  // How the run made its global batch: /trainer attributes world_size, batch_size and grad_accum (all three
  // or none). None in files written before they were recorded: such a file is taken to have been written
  // with the world size, batch size and grad_accum of the run that resumes it (resume it on as many ranks).
  std::optional<GlobalBatch> global_batch;
};

// FP8 training's scaling state (amp::Fp8Context::state_dict()): names are paths "<param>/<role>/<what>"
// (any depth), stored as groups under /fp8, whose attribute "recipe" is the run's Fp8Recipe::str(). Empty
// (no /fp8 group) for a run without FP8.
struct Fp8CheckpointState {
  std::string recipe;
  std::vector<NamedTensor> tensors;
  bool empty() const { return tensors.empty() && recipe.empty(); }
};

struct Checkpoint {
  std::vector<NamedTensor> model;    // parameters, fp32, in named_parameters() order
  std::vector<NamedTensor> buffers;  // in named_buffers() order
  OptimizerState optimizer;
  std::optional<LRSchedulerState> schedule;
  amp::GradScalerState scaler;  // empty when the run has no (enabled) scaler
  Fp8CheckpointState fp8;
  TrainerProgress trainer;
  std::map<std::string, std::string> data;  // named text blobs
  CheckpointMeta meta;
};

// Writes `checkpoint` to `path` atomically: a crash at any moment leaves either the old file or the new
// complete one, never a partial file under `path`.
absl::Status save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads and checks a whole file (structure, dtypes, shapes consistent within the file, format version not
// newer than this library's). Errors name the file and the object, e.g. "runs/a/step_400.h5: /optimizer
// has no group 'groups'".
absl::StatusOr<Checkpoint> load_checkpoint(const std::string& path);

// Recomputes the seal (the size and CRC-32 in the file's first 512 bytes, checked by load_checkpoint) of a
// checkpoint changed on purpose by another tool, e.g. h5py in "r+" mode. Any other change is corruption.
absl::Status reseal_checkpoint(const std::string& path);

// Checks, changing nothing, that `checkpoint` fits `model` and `optimizer`: the same parameter and buffer
// names with the same shapes and dtypes, an optimizer of the same type over the same parameters. The error
// names `path` and the first mismatch: "runs/a/step_400.h5: /model/layers.0.weight has shape [256, 784],
// the model expects [512, 784]".
absl::Status check_compatible(const std::string& path, const Checkpoint& checkpoint, const Module& model,
                              const Optimizer& optimizer);

// A folder of checkpoints <dir>/step_<step>.h5, keeping the newest `keep`, with a `latest` file naming the
// newest complete one (replaced atomically, after the checkpoint's rename).
class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir, int64_t keep = 3);
  // Creates the folder if needed, writes step_<checkpoint.trainer.step>.h5, updates `latest`, then removes
  // the oldest beyond `keep`. Returns the path written.
  absl::StatusOr<std::string> write(const Checkpoint& checkpoint);
  // The path `latest` names (error when there is none or it names a missing file).
  absl::StatusOr<std::string> latest() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int64_t keep_;
};

// --resume's argument: "latest" means CheckpointDir(dir).latest(); anything else is a file path.
absl::StatusOr<std::string> resolve_resume(const std::string& resume, const std::string& checkpoint_dir);

}  // namespace mantissa
