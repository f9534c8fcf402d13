// The Trainer's loop: micro-batches under autocast, the scaled backward, unscale + grad norm (+ clip), the
// scaler's step and update, the lr schedule, and when to evaluate, checkpoint and stop. Elsewhere: the steps
// in flight and their read (train/step_pipeline.h), the evaluation (trainer_eval.cc), the run's state as a
// checkpoint and back and fit()'s checkpoint files (trainer_checkpoint.cc).
#include "train/trainer.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/generator.h"
#include "framework/profiler/profiler.h"
#include "ops/elementwise/elementwise.h"
#include "optim/clip_grad.h"
#include "train/ddp.h"
#include "train/rank_agreement.h"
#include "train/zero.h"

namespace mantissa {
namespace {

// Runs `f` as one of a step's phases, a profiler range that the speed report sums by name.
template <typename F>
decltype(auto) phase(std::string_view name, F&& f) {
  return profiler::record(name, profiler::Category::kPhase, std::forward<F>(f));
}

// The loader's next batch, on the run's device (asynchronously from a pinned loader).
Example next_batch(DataLoader& loader, Device device) {
  std::optional<Example> batch = loader.next();
  MT_ASSERT(batch.has_value(), "Trainer: the loader ended an epoch early");
  to_device(*batch, device);
  return std::move(*batch);
}

Tensor scalar_loss(const Tensor& loss) {
  MT_CHECK(loss.defined() && loss.numel() == 1, "Trainer: the task's loss must be a scalar tensor, got ",
           loss.defined() ? shape_str(loss.shape()) : std::string("an undefined tensor"));
  return loss;
}

// Whether a micro-batch's backward all-reduces the grads (with DDP: the step's last micro-batch) or only
// accumulates them on this rank (the others).
enum class GradSync { kAllReduce, kLocalOnly };

void backward(const Tensor& scaled_loss, DistributedDataParallel* ddp, GradSync sync) {
  if (ddp != nullptr && sync == GradSync::kLocalOnly) {
    auto local_only = ddp->no_sync();
    scaled_loss.backward();
  } else {
    scaled_loss.backward();  // with DDP: buckets are all-reduced while this runs
  }
}

}  // namespace

Trainer::Trainer(TrainerConfig config, Module& model, Task task, Optimizer& optimizer, DataLoader& train,
                 DataLoader* eval)
    : config_(std::move(config)),
      model_(model),
      task_(std::move(task)),
      optimizer_(optimizer),
      train_(train),
      eval_(eval),
      scaler_(trainer_scaler_options(config_)) {
  check_trainer_config(config_);
  if (config_.stop != nullptr) stop_ = config_.stop;
  MT_CHECK(task_.loss != nullptr, "Trainer: the task has no loss function");
  MT_CHECK(eval_ == nullptr || task_.evaluate != nullptr,
           "Trainer: an eval loader was given but the task has no evaluate function");
  MT_CHECK(train_.batches_per_epoch() > 0, "Trainer: the training loader yields no batch (", train_.samples_per_epoch(),
           " samples per epoch)");
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
    const auto& group = optimizer_.group_params(g);
    params_.insert(params_.end(), group.begin(), group.end());
  }
  // The run's device is the model's: batches are moved there (asynchronously from pinned loaders).
  if (!params_.empty()) device_ = params_.front().tensor.device();
  for (const NamedTensor& p : params_) {
    MT_CHECK(p.tensor.device() == device_, "Trainer: parameter '", p.name, "' is on ", p.tensor.device().str(), ", '",
             params_.front().name, "' on ", device_.str(),
             ". HINT: move the whole model with model.to(device) "
             "before creating the optimizer");
  }
  if (config_.schedule) scheduler_.emplace(optimizer_, *config_.schedule);
  if (ProcessGroup* group = config_.process_group; group != nullptr && group->size() > 1) {
    rank_ = group->rank();
    world_size_ = group->size();
    // Every rank must run the same number of steps per epoch, or the collectives stop matching and the job
    // hangs until the timeout; tell the user now instead.
    if (const std::optional<RankDisagreement> d = ranks_disagree(*group, train_.batches_per_epoch())) {
      MT_THROW("Trainer: rank ", d->rank, "'s training loader has ", d->value, " batches per epoch, rank 0's has ",
               d->rank0_value,
               ". HINT: shard the training loader with the same dataset and batch size on every rank "
               "(DataLoaderOptions::shard)");
    }
    // Before the working copies are made: the broadcast replaces the other ranks' initial weights.
    ddp_ = std::make_unique<DistributedDataParallel>(model_, *group,
                                                     DDPOptions{.bucket_cap_mb = config_.ddp_bucket_cap_mb});
    if (config_.zero_stage == 1) zero_ = std::make_unique<ZeroRedundancy>(*ddp_, optimizer_);
  }
  pipeline_ = StepPipeline({.group = config_.process_group,
                            .world_size = world_size_,
                            .read_lag = config_.step_read_lag >= 0 ? config_.step_read_lag : (device_.is_cpu() ? 0 : 1),
                            .stop = stop_});
  if (config_.precision == Precision::kFp8) {
    fp8_ = std::make_unique<amp::Fp8Context>(model_, config_.fp8_recipe, config_.fp8);
    fp8_->to(device_);
    MT_CHECK(!fp8_->managed().empty(),
             "Trainer: precision fp8, but no linear of the model can run in FP8 (an FP8 GEMM needs in and out "
             "features that are multiples of 16, and TrainerConfig::fp8.exclude leaves some out). HINT: train "
             "in bf16, or widen the layers");
  }
  if (config_.precision != Precision::kF32) {
    if (zero_) {
      zero_->enable_working_copies(precision_dtype(config_.precision));
    } else {
      optimizer_.enable_working_copies(precision_dtype(config_.precision));
    }
  }
  // Rank 0 alone writes the metrics and TensorBoard files (fit() opens them) and the checkpoints.
  if (rank_ == 0 && !config_.checkpoint_dir.empty()) {
    checkpoints_.emplace(config_.checkpoint_dir, config_.keep_checkpoints);
  }
  if (rank_ == 0) {
    sinks_ = MetricSinks({.metrics_path = config_.metrics_path,
                          .tensorboard_dir = config_.tensorboard_dir,
                          .histogram_every = config_.tensorboard_histogram_every});
  }
}

Trainer::~Trainer() = default;

void Trainer::on_step_end(std::function<void(const StepMetrics&)> callback) {
  step_callbacks_.push_back(std::move(callback));
}
void Trainer::on_eval_end(std::function<void(const EvalMetrics&)> callback) {
  eval_callbacks_.push_back(std::move(callback));
}
void Trainer::set_data(const std::string& name, std::string blob) { data_[name] = std::move(blob); }

int64_t Trainer::steps_per_epoch() const {
  return (train_.batches_per_epoch() + config_.grad_accum - 1) / config_.grad_accum;
}

void Trainer::emit(const StepPipeline::ReadStep& read) {
  sinks_.write(read.metrics, read.histograms);
  for (auto& callback : step_callbacks_) callback(read.metrics);
}
void Trainer::emit(const EvalMetrics& m) {
  sinks_.write(m);
  for (auto& callback : eval_callbacks_) callback(m);
}

// One optimizer step in the AMP recipe: each micro-batch's forward under autocast and its scaled backward,
// then unscale, clip, the step (skipped on the device when a grad is inf or nan) and the scale's update.
// Nothing is read on the host; the step's values go into the pipeline.
void Trainer::enqueue_step() {
  // The step as a range named as torch.profiler's ProfilerStep#N, which trace tools (HTA) split steps by.
  profiler::RecordScope step_range(profiler::is_enabled() ? "ProfilerStep#" + std::to_string(step_ + 1) : "",
                                   profiler::Category::kRange);
  StepPipeline::Step step = begin_step();
  // The last step of an epoch takes the batches that are left; each micro-batch's loss is divided by the
  // number of micro-batches of its step, so the grads are the mean over them.
  const int64_t micro = std::min(config_.grad_accum, train_.batches_per_epoch() - train_.position().batch);
  for (int64_t i = 0; i < micro; ++i) {
    const Example batch = phase("data", [&] { return next_batch(train_, device_); });
    const Tensor loss = phase("forward", [&] {
      PrecisionScope autocast(config_.precision, device_, fp8_.get());
      return scalar_loss(task_.loss(batch));
    });
    step.add_micro_batch(loss, batch[0].size(0));
    const Tensor share = micro > 1 ? loss / static_cast<double>(micro) : loss;
    phase("backward", [&] {
      backward(scaler_.scale(share), ddp_.get(), i + 1 < micro ? GradSync::kLocalOnly : GradSync::kAllReduce);
    });
  }
  if (zero_) {
    phase("reduce_scatter", [&] { zero_->finish(); });  // this rank's shard of the mean grads
  } else if (ddp_) {
    phase("all_reduce", [&] { ddp_->finish(); });  // the grads are now the mean over the ranks
  }
  NoGradGuard no_grad;
  end_micro_batches(step);
  // The scale this step used, copied before update() changes it.
  const Tensor scale = scaler_.is_enabled() ? scaler_.scale_tensor().to(DType::kF64).to(device_) : Tensor();
  if (scaler_.is_enabled()) phase("unscale", [&] { scaler_.unscale_(optimizer_); });
  profiler::RecordScope optimizer_phase("optimizer", profiler::Category::kPhase);
  // The histograms see the grads the optimizer would: unscaled, before clipping (rank 0 alone writes them,
  // and after DDP's all-reduce its grads are every rank's). They are read on the host: a synchronization
  // every tensorboard_histogram_every steps.
  // With ZeRO-1 every rank gathers the whole grads for rank 0's histograms (the same steps on every rank).
  if (zero_ && !config_.tensorboard_dir.empty() && config_.tensorboard_histogram_every > 0 &&
      (step_ + 1) % config_.tensorboard_histogram_every == 0) {
    zero_->gather_grads();
  }
  if (sinks_.histograms_due(step_ + 1)) step.histograms = gradient_histograms(params_);
  // Without clipping the norm is still measured for the metrics (an infinite max_norm never scales).
  const double max_norm = config_.clip_grad_norm > 0 ? config_.clip_grad_norm : std::numeric_limits<double>::infinity();
  step.values().grad_norm(zero_ ? zero_->clip_grad_norm_(max_norm) : enqueue_clip_grad_norm_(params_, max_norm));
  scaler_.enqueue_step(optimizer_);
  if (zero_) phase("all_gather", [&] { zero_->gather_parameters(); });  // the updated masters on every rank
  if (scaler_.is_enabled()) step.values().scaler(scale, scaler_.found_inf(optimizer_));
  scaler_.update();
  end_step(std::move(step));
}

StepPipeline::Step Trainer::begin_step() {
  StepPipeline::Step step =
      pipeline_.start({.world_size = world_size_, .scaler = scaler_.is_enabled(), .fp8 = fp8_ != nullptr}, device_);
  model_.train();
  step.metrics.epoch = train_.position().epoch;
  step.metrics.lr = optimizer_.lr(0);
  optimizer_.zero_grad();
  // Rank 0's buffers (BatchNorm's running statistics) on every rank before the step's first forward, as
  // PyTorch's DDP does at the start of its forward: each rank then updates them from its own shard.
  if (ddp_) ddp_->sync_buffers();
  return step;
}

void Trainer::end_micro_batches(StepPipeline::Step& step) {
  // The logged loss's all-reduce (with DDP) runs while the optimizer steps; the scaler's found_inf
  // all-reduce in between is started after it on every rank, so the order of collectives matches.
  pipeline_.share_loss(step);
  // The epoch's last batch was taken: move the loader on now, so that the position saved with a checkpoint
  // reads {next epoch, 0}.
  if (train_.position().batch == train_.batches_per_epoch()) train_.next();
}

void Trainer::end_step(StepPipeline::Step step) {
  if (fp8_) {
    fp8_->step();  // the delayed scales for the next step, on the device
    step.values().fp8_overflows(fp8_->overflow_total());
  }
  if (scheduler_) scheduler_->step();
  step.metrics.step = ++step_;
  last_epoch_ = step.metrics.epoch;
  pipeline_.push(std::move(step));
}

absl::StatusOr<RunSummary> Trainer::fit() {
  fit_start_ = steady_seconds();
  // Ends this part of the run's wall time, however fit() returns.
  struct EndPart {
    Trainer& t;
    ~EndPart() {
      t.wall_before_ = t.wall_s();
      t.fit_start_ = -1.0;
    }
  } end_part{*this};
  if (!resumed_ && step_ == 0) default_generator().manual_seed(config_.seed);
  // A run past its first step (resumed, or fit() called again) goes on with the metrics file it wrote and
  // replaces the TensorBoard points after this step (train/metric_sinks.h).
  if (absl::Status s = sinks_.open(step_); !s.ok()) return s;
  last_checkpoint_step_ = -1;
  auto finished = [&] {
    return (config_.max_steps > 0 && step_ >= config_.max_steps) ||
           (config_.epochs > 0 && train_.position().epoch >= config_.epochs);
  };
  std::optional<EvalMetrics> last_eval;
  pipeline_.begin(scaler_.is_enabled() ? scaler_.stats().skipped_steps : 0);
  if (eval_ != nullptr && config_.eval_at_start == EvalAtStart::kYes && step_ == 0) last_eval = evaluate();
  while (!finished() && !pipeline_.agreed_stop()) {
    const int64_t epoch = train_.position().epoch;
    enqueue_step();
    const bool epoch_done = train_.position().epoch != epoch;
    const bool eval_due = eval_ != nullptr && (config_.eval_every > 0 ? step_ % config_.eval_every == 0 : epoch_done);
    // Every rank knows when rank 0 writes one (with ZeRO-1 they all take part).
    const bool checkpoint_due =
        !config_.checkpoint_dir.empty() && config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0;
    // The steps more than read_lag behind are read; before an evaluation, a checkpoint or the end, all of them.
    const auto due = eval_due || checkpoint_due || finished() ? StepPipeline::Due::kAll : StepPipeline::Due::kLagged;
    while (pipeline_.due(due)) emit(pipeline_.read());
    if (eval_due) last_eval = evaluate();
    if (checkpoint_due) {
      if (absl::Status s = write_checkpoint(); !s.ok()) return s;
    }
    if (absl::Status s = sinks_.status(); !s.ok()) return s;
  }

  // A stop read with steps still in flight takes them too.
  while (pipeline_.due(StepPipeline::Due::kAll)) emit(pipeline_.read());

  RunSummary summary;
  if (!finished()) {
    // Stopped on request: a checkpoint of this step, no final evaluation (a scheduler's grace period is
    // short), a "stopped" line and no summary line (the run is not over).
    absl::StatusOr<std::string> written = checkpoint_at_stop();
    if (!written.ok()) return written.status();
    const StopEvent stop{.step = step_, .signal = *pipeline_.agreed_stop(), .checkpoint = *written};
    if (absl::Status s = sinks_.write(stop); !s.ok()) return s;
    summary.stopped = stop;
  } else {
    if (eval_ != nullptr && last_eval_step_ != step_) last_eval = evaluate();
    if (!config_.checkpoint_dir.empty() && last_checkpoint_step_ != step_) {
      if (absl::Status s = write_checkpoint(); !s.ok()) return s;
    }
  }

  summary.steps = step_;
  summary.skipped_steps = scaler_.is_enabled() ? scaler_.stats().skipped_steps : 0;
  summary.final_scale = scaler_.get_scale();
  if (last_eval) {
    if (task_.classifier) {
      summary.test_accuracy = last_eval->accuracy;
    } else {
      summary.val_loss = last_eval->loss;
    }
  }
  summary.samples_per_s = pipeline_.median_samples_per_s(config_.warmup_steps);
  summary.wall_s = wall_s();
  if (absl::Status s = sinks_.finish(summary); !s.ok()) return s;
  return summary;
}

double Trainer::wall_s() const { return wall_before_ + (fit_start_ >= 0 ? steady_seconds() - fit_start_ : 0.0); }

}  // namespace mantissa
