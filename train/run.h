// What mantissa-train does, as a library call: the run's options (one field per flag), their validation,
// and run(), which loads the data, builds the model, optimizer, loaders and Trainer, trains, and prints
// the progress and the summary. The flags' names, help and ranges are in train/run_flags.cc's table; the
// fields here hold their types and defaults. train_main.cc only turns flags into RunOptions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/dist/process_group.h"
#include "train/metrics.h"
#include "train/stop.h"
#include "train/trainer.h"

namespace mantissa {

enum class ModelKind { kMLP, kCNN, kGPT };
enum class DataKind { kDefault, kFashionMnist, kText, kSynthetic };  // kDefault: fashion-mnist, text for gpt
enum class OptimizerKind { kSGD, kAdam, kAdamW, kLion };
enum class ProgressMode { kAuto, kBar, kLines, kNone };
// BatchNorm's batch statistics under mpirun: each rank's own batch, or the global batch of all ranks
// (SyncBatchNorm, models/layers/sync_batch_norm.h).
enum class BatchNormStats { kLocal, kSync };
// Activation checkpointing of the GPT: none, or each transformer block recomputed in backward.
enum class RecomputeMode { kNone, kBlocks };

struct RunOptions {
  ModelKind model = ModelKind::kMLP;
  DataKind data = DataKind::kDefault;
  std::string data_path;  // empty: the dataset's default location
  std::vector<int64_t> mlp_hidden = {1024, 1024};
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 128;
  double dropout = 0.0;
  BatchNormStats batchnorm = BatchNormStats::kLocal;  // cnn
  RecomputeMode recompute = RecomputeMode::kNone;     // gpt
  Precision precision = Precision::kF16;
  OptimizerKind optimizer = OptimizerKind::kAdam;
  double lr = 1e-3;
  double momentum = 0.9;               // SGD only
  std::optional<double> weight_decay;  // none: the optimizer's default (0; AdamW 0.01)
  // The precision ladder (optim/precision_ladder.h): masters, how updates round into bf16 weights, state storage.
  MasterWeights master_weights = MasterWeights::kFp32;
  UpdateRounding update_rounding = UpdateRounding::kNearest;
  StateStorage optimizer_state = StateStorage::kFp32;
  int64_t batch_size = 128;  // per rank under mpirun (the global batch is this times the ranks)
  int64_t global_batch = 0;  // > 0: samples per optimizer step over all ranks, instead of batch_size
  int64_t epochs = 5;
  int64_t max_steps = 0;  // 0: no limit (gpt: 2000 when epochs are not what ends the run)
  int64_t grad_accum = 1;
  double clip_grad_norm = 0.0;
  amp::GradScalerOptions scaler = amp::scaler_defaults_for(DType::kF16);  // used when precision is fp16
  std::string fp8_recipe = "delayed";                                     // precision fp8: amp::parse_fp8_recipe's text
  std::string fp8_accumulator =
      "f32";  // precision fp8 on the CPU: parse_fp8_accumulator's text (ops/fp8/accumulator.h)
  uint64_t seed = 1;
  std::string device = "cpu";  // cpu | cuda | cuda:N (cuda: GPU 0)
  int64_t threads = 0;         // 0: all cores (under mpirun: the cores / the ranks on this machine)
  int64_t eval_every = 0;      // 0: each epoch end (gpt: every 200 steps)
  int64_t eval_batches = 0;    // 0: the whole test set (gpt: 20 batches)
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int64_t keep_checkpoints = 3;
  std::string resume;       // a path, "latest", or "auto" (latest when there is one, else a fresh start)
  std::string metrics;      // JSON lines path
  std::string tensorboard;  // TensorBoard event files' folder (empty: none)
  int64_t tensorboard_histogram_every = 100;  // steps between gradient histograms in them (0: none)
  std::string profile;                        // a Chrome trace of steps profile_wait + 1 ... (empty: no profiling)
  int64_t profile_wait = 2;                   // steps run before the profiled ones (warm-up)
  int64_t profile_steps = 3;
  double memory_budget_mib = 0;  // --report=memory: the largest batch within this many MiB (0: not asked)
  std::string report;            // "precision": the precision report instead of training
  std::string report_out = "precision_report";  // its files: <report_out>.json and <report_out>.png
  int64_t sample_chars = 400;                   // gpt: characters generated at the end
  ProgressMode progress = ProgressMode::kAuto;
  int64_t dist_timeout_s = 1800;  // under mpirun: a collective waiting longer ends the job
  // Under mpirun: kShapes makes the ranks compare every collective (kind, shape, dtype) before they run it.
  CollectiveCheck collective_check = CollectiveCheck::kOff;
  int64_t zero = 0;         // under mpirun: 1 shards the optimizer's state (ZeRO-1, train/zero.h)
  std::string config_json;  // stored in checkpoints; empty: to_json() of the options run() uses
};

// The first problem with `options` as a one-line message naming the flag, or ok.
absl::Status validate(const RunOptions& options);

// The data the run trains on: options.data, or for DataKind::kDefault the model's usual one (text for gpt,
// fashion-mnist for the others).
DataKind effective_data(const RunOptions& options);

// Trains as the options say, printing to `out`. Errors: data files, checkpoints, metrics file. Under mpirun
// (train/mpi_launcher_env.h) every rank trains its shard of each batch; rank 0 alone prints, writes the
// metrics and the checkpoints, and the other ranks print nothing. Before their first collective the ranks
// agree on their flags, on the point the run starts from and on the model (train/run_parts.h); a
// disagreement is an agreed error (train/rank_agreement.h), the same on every rank. A request on `stop` (e.g. from
// StopOnSignals) ends the run after the step in progress with a checkpoint: the summary's `stopped` says so.
absl::StatusOr<RunSummary> run(const RunOptions& options, std::FILE* out, StopRequest* stop = nullptr);

// mantissa-train's exit statuses: finished; failed (data, checkpoint, metrics errors); a bad flag; stopped
// by a signal or request after writing its checkpoint ("preempted, resume me": 75 is sysexits.h's
// EX_TEMPFAIL). A second Ctrl-C during the stop ends the process by SIGINT (a shell's 130).
inline constexpr int kExitFinished = 0, kExitFailed = 1, kExitUsage = 2, kExitStopped = 75;

}  // namespace mantissa
