// Trainer: the training loop a user embeds. It runs the optimizer steps of a model over a DataLoader in
// fp32, fp16 (autocast + GradScaler), bf16 (autocast) or fp8 (FP8 linears with per-tensor scaling, bf16
// autocast elsewhere: amp/fp8.h), with gradient accumulation, clipping, an lr
// schedule, periodic evaluation, metrics (JSON lines, TensorBoard event files), callbacks and HDF5
// checkpoints that resume exactly.
//
//   MLP model(784, {256, 256}, 10);
//   Adam adam(model.named_parameters(), {.lr = 1e-3});
//   DataLoader train(train_set, {.batch_size = 128, .shuffle = Shuffle::kRandom, .seed = 1});
//   DataLoader test(test_set, {.batch_size = 1000});
//   Trainer trainer({.precision = Precision::kF16, .epochs = 5}, model,
//                   classification_task([&](const Tensor& x) { return model.forward(x.flatten(1)); }),
//                   adam, train, &test);
//   absl::StatusOr<RunSummary> summary = trainer.fit();
//
// Data parallelism (TrainerConfig::process_group with more than one rank): every rank builds the same
// model, optimizer and loaders, the training loader sharded ({.shard = {.rank, .world_size}}, the batch
// size per rank) and the eval loader NOT sharded (the Trainer gives rank r its batches r, r + W, ...). The
// Trainer then averages the gradients with DistributedDataParallel (rank 0's initial weights; rank 0's
// buffers, such as BatchNorm's running statistics, before every step and every evaluation), accumulates
// without syncing for all but the last micro-batch, agrees on the loss scaler's found_inf, and reports
// global numbers on every rank: the loss averaged over the ranks, evaluation sums over all of the eval
// batches, samples/s of all ranks. Rank 0 alone writes the metrics and TensorBoard files and the
// checkpoints; every rank reads the checkpoint it resumes from.
//
// Resuming on another number of ranks. The global batch of an optimizer step, G = W ranks x b (the training
// loader's batch size, per rank) x A (grad_accum), belongs to the run: checkpoints record how it was made
// (/trainer world_size, batch_size, grad_accum: GlobalBatch), and restore() keeps it. On W' ranks each
// rank's loader must take b' = G / (W' x A') (resume_batch_size(); mantissa-train sets it itself); restore()
// refuses another global batch, naming the batch size that fits, and a G that W' x A' does not divide. The
// steps then see the same samples at any W. Each epoch's permutation depends on the data set's size N, the
// seed and the epoch only, and rank r takes its positions r, r + W, r + 2W, ... (PyTorch's DistributedSampler:
// data/dataset.h shard_order), so rank r's batch j is positions (j b + i) W + r, i < b, the W ranks' batch j
// together is positions [j bW, (j + 1) bW), and step k takes positions [k G, (k + 1) G) whatever W and A are
// (tests/train/trainer_ranks_test.cc checks it at 1, 2 and 3 ranks). The checkpoint's position {epoch,
// batch} counts micro-batches of bW samples: it carries over unchanged when only W changes (bW = G / A), and
// is rescaled to this run's micro-batches (exact at a step's end) when grad_accum changes too. What W does
// change:
// - The epoch's tail. Unsharded drop_last (ShardOptions::drop_last kNo) pads the permutation to a multiple of
//   W with its first positions again, so the epoch's last step takes its remaining samples (the same at any
//   W) plus (W - N mod W) mod W repeats of the epoch's first ones: their number depends on W, none when W
//   divides N. The steps per epoch, ceil(N / G), do not. With ShardOptions::drop_last kYes the last N mod W
//   samples are left out instead, and with DataLoaderOptions::drop_last a padded tail can fill a last batch
//   that fewer ranks would drop: there the epoch's last step (or its count of steps) depends on W.
// - Rounding. A rank's loss is the mean over its b samples and DDP averages the ranks' grads: the mean over
//   the G samples, as on any W, but summed in other groups: the losses follow the run on W ranks to rounding
//   (tests/dist/train_dist_test.sh `ranks` measures it), not bit for bit.
// - Dropout. Every rank draws from the same default generator state (restored from the checkpoint) for its
//   own rows, so the mask a sample gets depends on its place in its rank's batch.
// The rest carries over as on a resume on as many ranks: step count, lr schedule, loss scaler, generators,
// the metrics file (appended), and the evaluation (split over the W' ranks, sums added: the same numbers).
// The optimizer state is the whole state in the checkpoint whoever wrote it, so it needs no conversion.
//
// Stopping early (train/stop.h): request_stop(), from any thread or a signal handler, ends fit() after the
// optimizer step in progress: a checkpoint is written (with checkpoint_dir), the metrics file gets a
// {"event": "stopped"} line and the summary comes back with `stopped` set. With several ranks a request on
// any one of them stops all of them after the same step (they agree in the all-reduce of the step's loss).
// resume() then continues the run exactly, its metrics file appended to.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/fp8.h"
#include "amp/grad_scaler.h"
#include "data/loader.h"
#include "framework/dist/process_group.h"
#include "framework/module.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/metric_sinks.h"
#include "train/metrics.h"
#include "train/precision.h"
#include "train/step_pipeline.h"
#include "train/stop.h"
#include "train/task.h"

namespace mantissa {

class DistributedDataParallel;
class ZeroRedundancy;

// kYes: evaluate once before the first step of a fresh run (the baseline a language model's loss falls from).
enum class EvalAtStart { kNo, kYes };

struct TrainerConfig {
  Precision precision = Precision::kF16;
  int64_t epochs = 0;                // passes over the training data, counted from the start of the run; 0: no limit
  int64_t max_steps = 0;             // optimizer steps from the start of the run; 0: no limit (one must be set)
  int64_t grad_accum = 1;            // micro-batches per optimizer step (the loss is averaged over them)
  double clip_grad_norm = 0.0;       // max total L2 norm of the unscaled grads; 0: no clipping
  std::optional<Schedule> schedule;  // lr multiplier by step; none: constant lr
  // The loss scaler; none: amp::scaler_defaults_for(the precision's dtype) (enabled for fp16 only).
  std::optional<amp::GradScalerOptions> scaler;
  int64_t eval_every = 0;    // steps between evaluations; 0: at the end of each epoch
  int64_t eval_batches = 0;  // batches of the eval loader per evaluation; 0: all of them
  EvalAtStart eval_at_start = EvalAtStart::kNo;
  std::string checkpoint_dir;    // empty: no checkpoints
  int64_t checkpoint_every = 0;  // steps between checkpoints (one is always written at the end); 0: end only
  int64_t keep_checkpoints = 3;
  uint64_t seed = 0;         // seeds default_generator() (dropout) when fit() starts a fresh run
  std::string metrics_path;  // empty: no metrics file
  // TensorBoard event files in this folder (train/tensorboard.h: scalars every step and evaluation, gradient
  // histograms every tensorboard_histogram_every steps, 0: none); empty: none. Rank 0 writes them.
  std::string tensorboard_dir;
  int64_t tensorboard_histogram_every = 100;
  int64_t warmup_steps = 10;  // steps left out of the summary's median samples/s
  std::string config_json;    // stored in checkpoints (/meta); the program puts its flags here
  // Data parallelism over this group (not owned, must outlive the Trainer); null or a world of one: this
  // process trains alone. See the top of this file.
  ProcessGroup* process_group = nullptr;
  double ddp_bucket_cap_mb = 25;  // DDPOptions::bucket_cap_mb
  // 1: ZeRO stage 1 (train/zero.h): each rank keeps the optimizer's state for its shard of the parameters
  // only (1/N of it), the grads are reduce-scattered and the updated masters all-gathered; results equal
  // plain data parallelism's (bit for bit on 2 ranks). Checkpoints hold the whole state either way, so a run
  // resumes with or without it. CPU parameters only; ignored in a world of one. 0: plain DDP.
  int zero_stage = 0;
  // Read at step boundaries; a request ends the run (see the top of this file). Not owned, must outlive the
  // Trainer; null: the Trainer's own, set by request_stop(). Give one here to request a stop before the
  // Trainer exists (signal handlers installed at the start of a program: StopOnSignals).
  StopRequest* stop = nullptr;
  // How many optimizer steps the host may run ahead of the values it logs. A step's loss, grad norm, skip flag
  // and loss scale stay on the device and are copied to pinned host memory without waiting as the step is
  // enqueued; they are read step_read_lag steps later. On a GPU this is written to leave no host read in a
  // step (the host queues step N + 1 while the GPU runs step N; no GPU has run it yet). Metrics and step
  // callbacks follow by that many steps: step N's callback runs once step N + lag is enqueued (trainer.step()
  // says N + lag there), and a stop request made then ends the run after step N + 1 + lag (with several
  // ranks, N + 1 + 2 lag: the ranks agree through the requests a step carries). An evaluation, a checkpoint
  // and the end of the run read every step in flight first. -1: 1 on a GPU, 0 on the CPU (whose steps are
  // done when enqueued).
  int64_t step_read_lag = -1;
  // Precision::kFp8 only: how the FP8 scales are chosen, and which linears stay out of FP8 (besides those
  // whose features are not multiples of 16). A run resumes only with the recipe it was written with.
  amp::Fp8Recipe fp8_recipe = amp::Fp8Recipe::delayed();
  amp::Fp8Options fp8;
};

// "2 ranks x 48 per rank = 96 per step" (" x grad_accum A" before the "=" when A > 1).
std::string describe(const GlobalBatch& batch);
// The training loader's batch size per rank that keeps `written`'s global batch on `world_size` ranks with
// `grad_accum` micro-batches per step (see the top of this file). InvalidArgument naming both when
// world_size x grad_accum does not divide it: "written by 2 ranks x 48 per rank = 96 per step, which 5 ranks
// cannot split evenly (...)".
absl::StatusOr<int64_t> resume_batch_size(const GlobalBatch& written, int64_t world_size, int64_t grad_accum);

// Throws mantissa::Error naming the first TrainerConfig field out of range (the Trainer's constructor calls it).
void check_trainer_config(const TrainerConfig& c);
// The GradScaler's options for `c` (its own, or fp16's defaults), with the run's process group so that the
// ranks agree on found_inf.
amp::GradScalerOptions trainer_scaler_options(const TrainerConfig& c);

class Trainer {
 public:
  // The model, task, optimizer and loaders are the caller's and must outlive the Trainer. `eval` may be
  // null (then there is no evaluation).
  Trainer(TrainerConfig config, Module& model, Task task, Optimizer& optimizer, DataLoader& train,
          DataLoader* eval = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until `epochs` or `max_steps` (counted from the start of the run, so a resumed run stops where
  // an unbroken one would), evaluating and checkpointing as configured; evaluates once more at the end
  // unless the last step just did, writes the final checkpoint and the summary. Errors: files (metrics,
  // checkpoints). A failing op throws mantissa::Error as everywhere.
  absl::StatusOr<RunSummary> fit();

  // One evaluation over the eval loader (from its first batch) at the current weights.
  EvalMetrics evaluate();

  // Called after every optimizer step / evaluation, in registration order, on every rank (with the same,
  // global, numbers).
  void on_step_end(std::function<void(const StepMetrics&)> callback);
  void on_eval_end(std::function<void(const EvalMetrics&)> callback);

  // Asks fit() to stop after the optimizer step in progress (see the top of this file). Thread-safe and
  // async-signal-safe; `signal` is reported as the reason (0: none). Requests config.stop when it is set.
  void request_stop(int signal = 0) noexcept { stop_->request(signal); }

  // A text blob stored under /data/<name> in checkpoints (e.g. "vocabulary").
  void set_data(const std::string& name, std::string blob);
  const std::map<std::string, std::string>& data() const { return data_; }

  // The run's state as a checkpoint, and back. restore() validates everything (check_compatible, the global
  // batch: see the top of this file) before it changes anything; `path` only names the source in errors.
  // With ZeRO-1, checkpoint() and save_checkpoint() gather the optimizer's state from every rank: every
  // rank must call them together.
  Checkpoint checkpoint() const;
  absl::Status restore(const Checkpoint& checkpoint, const std::string& path = "checkpoint");
  absl::Status save_checkpoint(const std::string& path) const;
  // Loads `path` ("latest" resolves in config.checkpoint_dir) and restores it. With several ranks every
  // rank reads the file (it must be visible to all of them) and they check that they resumed the same step.
  absl::Status resume(const std::string& path);

  int64_t step() const { return step_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // This run's global batch: world_size() x the training loader's batch size x grad_accum.
  GlobalBatch global_batch() const;
  const TrainerConfig& config() const { return config_; }
  amp::GradScaler& scaler() { return scaler_; }
  amp::Fp8Context* fp8() { return fp8_.get(); }               // null unless the precision is fp8
  const ZeroRedundancy* zero() const { return zero_.get(); }  // null unless ZeRO-1 runs
  // Steps per epoch: ceil(batches per epoch / grad_accum).
  int64_t steps_per_epoch() const;

 private:
  // Enqueues one optimizer step (on a GPU written to read nothing on the host) and puts it in flight.
  void enqueue_step();
  // The parts of enqueue_step around its AMP recipe: the step's start (train mode, zero grads, DDP's
  // buffers), the end of its micro-batches (the loss into its record, the loader past an epoch's end) and
  // its end (FP8 scales, lr schedule, step count, into the pipeline).
  StepPipeline::Step begin_step();
  void end_micro_batches(StepPipeline::Step& step);
  void end_step(StepPipeline::Step step);
  // fit()'s checkpoints (trainer_checkpoint.cc): this step's into checkpoints_ (the metric files are flushed
  // with it); at a stop, this step's unless it has one, waited for by every rank: its path, empty for none.
  absl::Status write_checkpoint();
  absl::StatusOr<std::string> checkpoint_at_stop();
  double wall_s() const;  // of the whole run: the parts before a resume and this one
  void emit(const StepPipeline::ReadStep& read);
  void emit(const EvalMetrics& m);

  TrainerConfig config_;
  Module& model_;
  Task task_;
  Optimizer& optimizer_;
  DataLoader& train_;
  DataLoader* eval_;
  amp::GradScaler scaler_;
  std::unique_ptr<amp::Fp8Context> fp8_;  // Precision::kFp8: the FP8 linears' scaling state
  int rank_ = 0, world_size_ = 1;
  std::unique_ptr<DistributedDataParallel> ddp_;  // set when world_size_ > 1
  std::unique_ptr<ZeroRedundancy> zero_;          // set with ddp_ when config.zero_stage is 1
  std::optional<LRScheduler> scheduler_;
  std::vector<NamedTensor> params_;           // every group's parameters, for the grad norm and clipping
  Device device_ = kCPU;                      // the parameters' device, where batches are moved
  MetricSinks sinks_;                         // the metrics and TensorBoard files (rank 0's)
  StepPipeline pipeline_;                     // the steps enqueued and not read yet
  std::optional<CheckpointDir> checkpoints_;  // rank 0's, with config.checkpoint_dir
  int64_t last_checkpoint_step_ = -1;         // the step of the last checkpoint this fit() wrote; -1: none
  std::string last_checkpoint_;               // its path
  std::vector<std::function<void(const StepMetrics&)>> step_callbacks_;
  std::vector<std::function<void(const EvalMetrics&)>> eval_callbacks_;
  std::map<std::string, std::string> data_;
  int64_t step_ = 0;
  bool resumed_ = false;
  int64_t last_eval_step_ = -1;
  int64_t last_epoch_ = 0;  // of the latest step
  StopRequest own_stop_;
  StopRequest* stop_ = &own_stop_;  // config.stop or own_stop_
  double wall_before_ = 0.0;        // wall time of the run before this process resumed it (from the checkpoint)
  double fit_start_ = -1.0;         // when fit() started; -1 outside fit()
};

}  // namespace mantissa
