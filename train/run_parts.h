// What mantissa-train's run (run.cc) and its reports (run_reports.cc) share: the data and model a run is
// built from, and the report runs that replace training (--report=precision | speed | memory). Internal to
// train/run*.cc.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/text.h"
#include "framework/module.h"
#include "models/gpt.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/run.h"
#include "train/task.h"
#include "train/trainer.h"

namespace mantissa::run_parts {

struct Data {
  std::shared_ptr<const Dataset> train, eval;
  std::optional<Vocabulary> vocab;  // text
  int64_t vocab_size = 0;
};

struct Model {
  std::shared_ptr<Module> module;
  Task task;
  std::shared_ptr<GPT> gpt;  // set for --model=gpt
};

// Under mpirun, before any other collective (train/run_agreement.cc). Each is a collective that every rank
// makes at the same point, and on a disagreement returns the same agreed error (train/rank_agreement.h) on
// every rank: InvalidArgument for a set-up to fix (mantissa-train's status 2), FailedPrecondition when a
// rank cannot read its checkpoint (1). In a world of one they check nothing but the checkpoint.
// The flags every rank must be started with alike (FlagInfo::across_ranks), and the kind of --device.
absl::Status agree_on_flags(ProcessGroup& group, const RunOptions& o);
// Where the run starts: --resume resolved by each rank in its own --checkpoint_dir and its checkpoint read;
// then every rank must start afresh or every rank from the same step.
struct ResumePoint {
  std::optional<Checkpoint> checkpoint;  // none: a fresh start
  std::string path;
};
absl::StatusOr<ResumePoint> agree_on_resume(ProcessGroup& group, const RunOptions& o);
// The training loader's batch size on each of `world` ranks: --batch_size, or --global_batch split over the
// ranks and --grad_accum; resuming `checkpoint` (read from `path`; null: a fresh start), the checkpoint's
// global batch so split (train/trainer.h). InvalidArgument naming the settings, and the --batch_size that
// fits, when --batch_size or --global_batch asks for another global batch than the checkpoint's or the global
// batch does not split evenly. Not a collective: every rank decides alike from the same flags and checkpoint.
absl::StatusOr<int64_t> batch_size_per_rank(const RunOptions& o, int world, const Checkpoint* checkpoint,
                                            const std::string& path);
// The model's parameters: names, shapes and dtypes (parameters_disagree).
absl::Status agree_on_model(ProcessGroup& group, Module& model);

Model build_model(const RunOptions& o, const Data& data);
std::unique_ptr<Optimizer> build_optimizer(const RunOptions& o, Module& model);
// The precision ladder of --master_weights, --update_rounding, --optimizer_state (stochastic rounding keyed by --seed).
PrecisionLadder precision_ladder(const RunOptions& o);

// --report=precision: the first training batch through amp::precision_report; nothing is trained.
absl::StatusOr<RunSummary> precision_report_run(const RunOptions& o, Model& model, DataLoader& train, Trainer& trainer,
                                                Device device, std::FILE* out);
// --report=speed: profiled steps in fp32, bf16 and fp16 (train/speed_report.h). Trains the model a few steps.
absl::StatusOr<RunSummary> speed_report_run(const RunOptions& o, Model& model, Optimizer& optimizer, DataLoader& train,
                                            Device device, std::FILE* out);
// --report=memory: a step's parts per precision, and the batch a budget allows (train/memory_report.h).
absl::StatusOr<RunSummary> memory_report_run(const RunOptions& o, const Data& data, Model& model, Optimizer& optimizer,
                                             DataLoader& train, Device device, std::FILE* out);

}  // namespace mantissa::run_parts
