// The Trainer's loop: micro-batches under autocast, the scaled backward, unscale + grad norm (+ clip), the
// scaler's step and update, the lr schedule, evaluation, metrics and checkpoints. The run's state as a
// checkpoint and back (checkpoint, restore, resume): train/trainer_checkpoint.cc.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "amp/autocast.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/generator.h"
#include "models/gpt.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"
#include "optim/clip_grad.h"
#include "train/ddp.h"
#include "train/step_values.h"

namespace mantissa {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

DType precision_dtype(Precision p) {
  switch (p) {
    case Precision::kF16: return DType::kF16;
    case Precision::kBF16:
    case Precision::kFp8: return DType::kBF16;  // fp8: what the layers outside the FP8 linears run in
    case Precision::kF32: break;
  }
  return DType::kF32;
}

// Autocast for the run's precision (nothing for fp32), and with FP8 the routing of its linears.
class PrecisionScope {
 public:
  PrecisionScope(Precision p, Device device, amp::Fp8Context* fp8) {
    if (p != Precision::kF32) guard_.emplace(amp::AutocastOptions{.device = device.type, .dtype = precision_dtype(p)});
    if (fp8 != nullptr) fp8_guard_.emplace(*fp8);
  }

 private:
  std::optional<amp::AutocastGuard> guard_;
  std::optional<amp::Fp8Guard> fp8_guard_;
};

void to_device(Example& batch, Device device) {
  if (device.is_cpu()) return;
  for (Tensor& t : batch) t = t.to(device);
}

void check_config(const TrainerConfig& c) {
  MT_CHECK(c.epochs >= 0 && c.max_steps >= 0, "Trainer: epochs (", c.epochs, ") and max_steps (", c.max_steps,
           ") must be >= 0");
  MT_CHECK(c.epochs > 0 || c.max_steps > 0,
           "Trainer: neither epochs nor max_steps is set, the run would never end. HINT: set one of them");
  MT_CHECK(c.grad_accum >= 1, "Trainer: grad_accum must be >= 1, got ", c.grad_accum);
  MT_CHECK(c.clip_grad_norm >= 0 && std::isfinite(c.clip_grad_norm),
           "Trainer: clip_grad_norm must be finite and >= 0 (0: no clipping), got ", c.clip_grad_norm);
  MT_CHECK(c.eval_every >= 0 && c.eval_batches >= 0 && c.checkpoint_every >= 0 && c.warmup_steps >= 0,
           "Trainer: eval_every, eval_batches, checkpoint_every and warmup_steps must be >= 0");
  MT_CHECK(c.tensorboard_histogram_every >= 0, "Trainer: tensorboard_histogram_every must be >= 0 (0: none), got ",
           c.tensorboard_histogram_every);
  MT_CHECK(c.keep_checkpoints >= 1, "Trainer: keep_checkpoints must be >= 1, got ", c.keep_checkpoints);
  MT_CHECK(c.step_read_lag >= -1, "Trainer: step_read_lag must be >= 0, or -1 (1 on a GPU, 0 on the CPU), got ",
           c.step_read_lag);
}

// The scaler's options with the run's process group, so that found_inf is agreed by all ranks.
amp::GradScalerOptions scaler_options(const TrainerConfig& c) {
  amp::GradScalerOptions o = c.scaler ? *c.scaler : amp::scaler_defaults_for(precision_dtype(c.precision));
  if (o.process_group == nullptr) o.process_group = c.process_group;
  return o;
}

Tensor scalar_loss(const Tensor& loss) {
  MT_CHECK(loss.defined() && loss.numel() == 1, "Trainer: the task's loss must be a scalar tensor, got ",
           loss.defined() ? shape_str(loss.shape()) : std::string("an undefined tensor"));
  return loss;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

}  // namespace

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kF32: return "fp32";
    case Precision::kF16: return "fp16";
    case Precision::kBF16: return "bf16";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

absl::StatusOr<Precision> parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kF32;
  if (name == "fp16") return Precision::kF16;
  if (name == "bf16") return Precision::kBF16;
  if (name == "fp8") return Precision::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", std::string(name), "' (expected fp32, fp16, bf16 or fp8)"));
}

Task classification_task(std::function<Tensor(const Tensor& x)> forward) {
  Task task;
  task.classifier = true;
  task.loss = [forward](const Example& batch) {
    MT_CHECK(batch.size() == 2, "classification_task: a batch must be {inputs, labels}, got ", batch.size(),
             " tensors");
    return cross_entropy(forward(batch[0]), batch[1]);
  };
  task.evaluate = [forward](const Example& batch) {
    MT_CHECK(batch.size() == 2, "classification_task: a batch must be {inputs, labels}, got ", batch.size(),
             " tensors");
    const Tensor logits = forward(batch[0]);
    EvalSums s;
    s.loss_sum = cross_entropy(logits, batch[1], {.reduction = Reduction::kSum}).item();
    s.correct = static_cast<int64_t>(sum(eq(argmax(logits, 1), batch[1]).to(DType::kF32)).item());
    s.count = batch[1].size(0);
    return s;
  };
  return task;
}

Task language_model_task(GPT& model) {
  Task task;
  task.loss = [&model](const Example& batch) {
    MT_CHECK(batch.size() == 2, "language_model_task: a batch must be {tokens, next tokens}, got ", batch.size(),
             " tensors");
    return model.forward(batch[0], batch[1]).loss;
  };
  task.evaluate = [&model](const Example& batch) {
    MT_CHECK(batch.size() == 2, "language_model_task: a batch must be {tokens, next tokens}, got ", batch.size(),
             " tensors");
    EvalSums s;
    s.count = batch[1].numel();
    s.loss_sum = model.forward(batch[0], batch[1]).loss.item() * static_cast<double>(s.count);
    return s;
  };
  return task;
}

Trainer::Trainer(TrainerConfig config, Module& model, Task task, Optimizer& optimizer, DataLoader& train,
                 DataLoader* eval)
    : config_(std::move(config)),
      model_(model),
      task_(std::move(task)),
      optimizer_(optimizer),
      train_(train),
      eval_(eval),
      scaler_(scaler_options(config_)) {
  check_config(config_);
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
  read_lag_ = config_.step_read_lag >= 0 ? config_.step_read_lag : (device_.is_cpu() ? 0 : 1);
  if (config_.schedule) scheduler_.emplace(optimizer_, *config_.schedule);
  if (ProcessGroup* group = config_.process_group; group != nullptr && group->size() > 1) {
    rank_ = group->rank();
    world_size_ = group->size();
    // Every rank must run the same number of steps per epoch, or the collectives stop matching and the job
    // hangs until the timeout; tell the user now instead.
    const Tensor all = group->all_gather(full({1}, train_.batches_per_epoch(), {.dtype = DType::kI64}));
    for (int q = 0; q < world_size_; ++q) {
      const double mine = all.select(0, q).item(), first = all.select(0, 0).item();
      MT_CHECK(mine == first, "Trainer: rank ", q, "'s training loader has ", mine, " batches per epoch, rank 0's has ",
               first,
               ". HINT: shard the training loader with the same dataset and batch size on every rank "
               "(DataLoaderOptions::shard)");
    }
    // Before the working copies are made: the broadcast replaces the other ranks' initial weights.
    ddp_ = std::make_unique<DistributedDataParallel>(model_, *group,
                                                     DDPOptions{.bucket_cap_mb = config_.ddp_bucket_cap_mb});
  }
  if (config_.precision == Precision::kFp8) {
    fp8_ = std::make_unique<amp::Fp8Context>(model_, config_.fp8_recipe, config_.fp8);
    fp8_->to(device_);
    MT_CHECK(!fp8_->managed().empty(),
             "Trainer: precision fp8, but no linear of the model can run in FP8 (an FP8 GEMM needs in and out "
             "features that are multiples of 16, and TrainerConfig::fp8.exclude leaves some out). HINT: train "
             "in bf16, or widen the layers");
  }
  if (config_.precision != Precision::kF32) optimizer_.enable_working_copies(precision_dtype(config_.precision));
  // Rank 0 alone writes the metrics and TensorBoard files; fit() opens them.
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

void Trainer::emit(const StepMetrics& m) {
  sinks_.write(m, grad_histograms_);
  grad_histograms_.reset();
  for (auto& callback : step_callbacks_) callback(m);
}
void Trainer::emit(const EvalMetrics& m) {
  sinks_.write(m);
  for (auto& callback : eval_callbacks_) callback(m);
}

void Trainer::enqueue_step() {
  InFlightStep s;
  s.start_s = now_s();
  model_.train();
  const LoaderPosition position = train_.position();
  // The last step of an epoch takes the batches that are left; each micro-batch's loss is divided by the
  // number of micro-batches of its step, so the grads are the mean over them.
  const int64_t micro = std::min(config_.grad_accum, train_.batches_per_epoch() - position.batch);
  optimizer_.zero_grad();
  // Rank 0's buffers (BatchNorm's running statistics) on every rank before the step's first forward, as
  // PyTorch's DDP does at the start of its forward: each rank then updates them from its own shard.
  if (ddp_) ddp_->sync_buffers();
  // The micro-batches' losses added on the device in f64, in order: the sum the host would make of item()s.
  Tensor loss_sum;
  for (int64_t i = 0; i < micro; ++i) {
    std::optional<Example> batch = train_.next();
    MT_ASSERT(batch.has_value(), "Trainer: the loader ended an epoch early");
    to_device(*batch, device_);
    s.samples += batch->at(0).size(0);
    Tensor loss;
    {
      PrecisionScope autocast(config_.precision, device_, fp8_.get());
      loss = scalar_loss(task_.loss(*batch));
    }
    {
      NoGradGuard no_grad;
      const Tensor wide = loss.detach().to(DType::kF64);
      loss_sum = loss_sum.defined() ? add(loss_sum, wide) : wide;
    }
    const Tensor scaled = scaler_.scale(micro > 1 ? loss / static_cast<double>(micro) : loss);
    if (ddp_ && i + 1 < micro) {
      auto local_only = ddp_->no_sync();  // all but the last micro-batch only accumulate on this rank
      scaled.backward();
    } else {
      scaled.backward();  // with DDP: buckets are all-reduced while this runs
    }
  }
  if (ddp_) ddp_->finish();  // the grads are now the mean over the ranks
  NoGradGuard no_grad;
  // The logged loss is the mean over the ranks (comparable with a one-process run of the whole batch). Its
  // all-reduce runs while the optimizer steps; the loss scaler's found_inf all-reduce in between is started
  // after it on every rank, so the order of collectives matches. The same all-reduce carries the ranks'
  // stop votes (train/step_values.h), so that a request on any rank stops all of them after the same step
  // without a collective of its own.
  s.local_stop = stop_vote(*stop_);
  StepValues::Builder values(
      StepValues({.world_size = world_size_, .scaler = scaler_.is_enabled(), .fp8 = fp8_ != nullptr}), device_);
  const Tensor shared = values.loss(micro > 1 ? div(loss_sum, static_cast<double>(micro)) : loss_sum, s.local_stop);
  if (ddp_) s.loss_work = config_.process_group->all_reduce_async(shared, ReduceOp::kSum);
  // The epoch's last batch was taken: move the loader on now, so that the position saved with a checkpoint
  // reads {next epoch, 0}.
  if (train_.position().batch == train_.batches_per_epoch()) train_.next();

  StepMetrics& m = s.metrics;
  m.epoch = position.epoch;
  m.lr = optimizer_.lr(0);
  // The scale this step used, copied before update() changes it.
  const Tensor scale = scaler_.is_enabled() ? scaler_.scale_tensor().to(DType::kF64).to(device_) : Tensor();
  if (scaler_.is_enabled()) scaler_.unscale_(optimizer_);
  // The histograms see the grads the optimizer would: unscaled, before clipping (rank 0 alone writes them,
  // and after DDP's all-reduce its grads are every rank's). They are read on the host: a synchronization
  // every tensorboard_histogram_every steps.
  if (sinks_.histograms_due(step_ + 1)) s.histograms = gradient_histograms(params_);
  // Without clipping the norm is still measured for the metrics (an infinite max_norm never scales).
  values.grad_norm(enqueue_clip_grad_norm_(
      params_, config_.clip_grad_norm > 0 ? config_.clip_grad_norm : std::numeric_limits<double>::infinity()));
  scaler_.enqueue_step(optimizer_);
  if (scaler_.is_enabled()) values.scaler(scale, scaler_.found_inf(optimizer_));
  scaler_.update();
  if (fp8_) {
    fp8_->step();  // the delayed scales for the next step, on the device
    values.fp8_overflows(fp8_->overflow_total());
  }
  if (scheduler_) scheduler_->step();
  if (s.loss_work) s.loss_work->wait();  // with NCCL the stream waits, not the host
  s.values = std::move(values).start_copy();
  m.step = ++step_;
  last_epoch_ = m.epoch;
  in_flight_.push_back(std::move(s));
}

StepMetrics Trainer::read_step() {
  MT_ASSERT(!in_flight_.empty(), "Trainer: no step in flight to read");
  InFlightStep s = std::move(in_flight_.front());
  in_flight_.pop_front();
  const StepHostValues v =
      StepValues({.world_size = world_size_, .scaler = scaler_.is_enabled(), .fp8 = fp8_ != nullptr})
          .decode(s.values.wait());
  // The values came through the all-reduce, done by now: asking again raises a watchdog's abort.
  MT_CHECK(!s.loss_work || s.loss_work->is_completed(), "Trainer: step ", s.metrics.step,
           "'s loss all-reduce has not completed although its values were read");
  StepMetrics m = s.metrics;
  m.loss = v.loss;
  // One process asks its own StopRequest as each step is read: a request made while step N was in flight
  // (from step N - 1's callback, a signal) stops the run after step N + step_read_lag. Ranks must agree:
  // they take the votes carried by the step read (the reason most ranks gave), so theirs stop one
  // step_read_lag later.
  const int agreed = ddp_ ? v.stop : stop_vote(*stop_);
  if (agreed_stop_ < 0) agreed_stop_ = agreed;  // the first step read that carries a request decides
  m.grad_norm = v.grad_norm;
  if (scaler_.is_enabled()) {
    m.scale = v.scale;
    m.skipped = v.found_inf;
    skipped_steps_ += m.skipped ? 1 : 0;
    m.skipped_steps = skipped_steps_;
  }
  if (fp8_) m.fp8_overflows = v.fp8_overflows;
  // The step's time from its start, or (the host running ahead) from when the step before it was read:
  // in a steady state that is how long the device took for it.
  const double now = now_s();
  const double elapsed = now - std::max(s.start_s, last_read_s_);
  last_read_s_ = now;
  // Every rank takes as many samples per step (the loaders are checked to match): this is all of them.
  m.samples_per_s = elapsed > 0 ? static_cast<double>(s.samples * world_size_) / elapsed : 0.0;
  samples_per_s_.push_back(m.samples_per_s);
  grad_histograms_ = std::move(s.histograms);
  return m;
}

EvalMetrics Trainer::evaluate() {
  MT_CHECK(eval_ != nullptr, "Trainer::evaluate: no eval loader was given to the Trainer");
  NoGradGuard no_grad;
  // Every rank evaluates its batches with rank 0's buffers: the last step updated each rank's from its own
  // shard, and the sums below must be those of one model.
  if (ddp_) ddp_->sync_buffers();
  model_.eval();
  eval_->set_position({.epoch = 0, .batch = 0});
  EvalSums total;
  {
    // FP8 evaluates with the scales training reached; without grad its casts record nothing (amp/fp8_linear.h),
    // so an evaluation leaves the run's scaling state as it found it.
    PrecisionScope autocast(config_.precision, device_, fp8_.get());
    for (int64_t b = 0; config_.eval_batches == 0 || b < config_.eval_batches; ++b) {
      std::optional<Example> batch = eval_->next();
      if (!batch) break;
      if (b % world_size_ != rank_) continue;  // rank r evaluates batches r, r + W, ...
      to_device(*batch, device_);
      const EvalSums s = task_.evaluate(*batch);
      total.loss_sum += s.loss_sum;
      total.correct += s.correct;
      total.count += s.count;
    }
  }
  model_.train();
  if (ddp_) {
    // Each batch is evaluated whole on one rank as one process would, so the sums over all ranks are the
    // one-process sums (added in another order, in f64; counts below 2^53 are exact).
    Tensor sums = from_vector(
        std::vector<double>{total.loss_sum, static_cast<double>(total.correct), static_cast<double>(total.count)});
    config_.process_group->all_reduce(sums, ReduceOp::kSum);
    const double* v = sums.data<double>();
    total = {.loss_sum = v[0], .correct = static_cast<int64_t>(v[1]), .count = static_cast<int64_t>(v[2])};
  }
  MT_CHECK(total.count > 0, "Trainer::evaluate: the eval loader yielded no example");
  EvalMetrics m;
  m.step = step_;
  m.epoch = last_epoch_;  // the epoch of the last step taken
  m.loss = total.loss_sum / static_cast<double>(total.count);
  if (task_.classifier) m.accuracy = static_cast<double>(total.correct) / static_cast<double>(total.count);
  last_eval_step_ = step_;
  emit(m);
  return m;
}

absl::StatusOr<RunSummary> Trainer::fit() {
  fit_start_ = now_s();
  agreed_stop_ = -1;
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
  std::optional<CheckpointDir> checkpoints;
  if (!config_.checkpoint_dir.empty() && rank_ == 0) {
    checkpoints.emplace(config_.checkpoint_dir, config_.keep_checkpoints);
  }
  int64_t last_checkpoint_step = -1;
  std::string last_checkpoint;
  auto write_checkpoint = [&]() -> absl::Status {
    absl::StatusOr<std::string> written = checkpoints->write(checkpoint());
    if (!written.ok()) return written.status();
    last_checkpoint_step = step_;
    last_checkpoint = *written;
    sinks_.flush();
    return absl::OkStatus();
  };

  auto finished = [&] {
    return (config_.max_steps > 0 && step_ >= config_.max_steps) ||
           (config_.epochs > 0 && train_.position().epoch >= config_.epochs);
  };
  std::optional<EvalMetrics> last_eval;
  samples_per_s_.clear();
  if (eval_ != nullptr && config_.eval_at_start == EvalAtStart::kYes && step_ == 0) last_eval = evaluate();
  in_flight_.clear();
  last_read_s_ = -1.0;
  skipped_steps_ = scaler_.is_enabled() ? scaler_.stats().skipped_steps : 0;
  while (!finished() && agreed_stop_ < 0) {
    const int64_t epoch = train_.position().epoch;
    enqueue_step();
    const bool epoch_done = train_.position().epoch != epoch;
    const bool eval_due = eval_ != nullptr && (config_.eval_every > 0 ? step_ % config_.eval_every == 0 : epoch_done);
    const bool checkpoint_due = checkpoints && config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0;
    // The steps more than read_lag_ behind are read; before an evaluation, a checkpoint or the end, all of them.
    const size_t keep = eval_due || checkpoint_due || finished() ? 0 : static_cast<size_t>(read_lag_);
    while (in_flight_.size() > keep) emit(read_step());
    if (eval_due) last_eval = evaluate();
    if (checkpoint_due) {
      if (absl::Status s = write_checkpoint(); !s.ok()) return s;
    }
    if (absl::Status s = sinks_.status(); !s.ok()) return s;
  }

  while (!in_flight_.empty()) emit(read_step());  // a stop read with steps still in flight takes them too

  RunSummary summary;
  if (!finished()) {
    // Stopped on request: a checkpoint of this step, no final evaluation (a scheduler's grace period is
    // short), a "stopped" line and no summary line (the run is not over).
    StopEvent stop{.step = step_, .signal = agreed_stop_};
    absl::Status written;
    if (checkpoints && last_checkpoint_step != step_) written = write_checkpoint();
    if (written.ok() && last_checkpoint_step == step_) stop.checkpoint = last_checkpoint;
    if (ddp_) {
      // The ranks wait for rank 0's checkpoint: none exits (and mpirun ends the job) while it is written,
      // and a failed write fails them all.
      Tensor failed = full({1}, written.ok() ? 0.0 : 1.0, {.dtype = DType::kF64});
      config_.process_group->all_reduce(failed, ReduceOp::kSum);
      if (written.ok() && failed.item() > 0) {
        return absl::InternalError(
            absl::StrCat("stopped at step ", step_, " but rank 0 could not write the checkpoint (its error says why)"));
      }
    }
    if (!written.ok()) return written;
    if (absl::Status s = sinks_.write(stop); !s.ok()) return s;
    summary.stopped = stop;
  } else {
    if (eval_ != nullptr && last_eval_step_ != step_) last_eval = evaluate();
    if (checkpoints && last_checkpoint_step != step_) {
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
  std::vector<double> rates = samples_per_s_;
  const size_t warmup = static_cast<size_t>(config_.warmup_steps);
  if (rates.size() > warmup) rates.erase(rates.begin(), rates.begin() + static_cast<std::ptrdiff_t>(warmup));
  summary.samples_per_s = median(std::move(rates));
  summary.wall_s = wall_s();
  if (absl::Status s = sinks_.finish(summary); !s.ok()) return s;
  return summary;
}

double Trainer::wall_s() const { return wall_before_ + (fit_start_ >= 0 ? now_s() - fit_start_ : 0.0); }

}  // namespace mantissa
