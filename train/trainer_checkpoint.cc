// The Trainer's run state as a checkpoint and back: checkpoint() (copies of everything a run resumes from),
// restore() (every check first, then the change, so a checkpoint that does not fit leaves the run as it
// was), save_checkpoint() and resume(); and the checkpoints fit() writes into checkpoint_dir (every
// checkpoint_every steps, at the end, at a stop). The loop itself is in train/trainer.cc.
#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/generator.h"
#include "framework/profiler/profiler.h"
#include "train/rank_agreement.h"
#include "train/trainer.h"
#include "train/zero.h"

namespace mantissa {
namespace {

std::vector<NamedTensor> deep_copy(const std::vector<NamedTensor>& tensors) {
  NoGradGuard no_grad;
  std::vector<NamedTensor> out;
  out.reserve(tensors.size());
  for (const NamedTensor& t : tensors) out.push_back({t.name, t.tensor.detach().clone()});
  return out;
}

// What a rank that cannot restore its checkpoint holds in the ranks' agreement on the step (steps are >= 0).
constexpr int64_t kCannotRestore = std::numeric_limits<int64_t>::min();

std::string ranks_text(int64_t n) { return absl::StrCat(n, n == 1 ? " rank" : " ranks"); }
std::string accum_text(int64_t grad_accum) {
  return grad_accum == 1 ? std::string() : absl::StrCat(" x grad_accum ", grad_accum);
}

}  // namespace

std::string describe(const GlobalBatch& b) {
  return absl::StrCat(ranks_text(b.world_size), " x ", b.batch_size, " per rank", accum_text(b.grad_accum), " = ",
                      b.samples(), " per step");
}

absl::StatusOr<int64_t> resume_batch_size(const GlobalBatch& written, int64_t world_size, int64_t grad_accum) {
  MT_CHECK(world_size >= 1 && grad_accum >= 1, "resume_batch_size: world_size ", world_size, " and grad_accum ",
           grad_accum, " must be >= 1");
  const int64_t split = world_size * grad_accum;
  if (written.samples() % split != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("written by ", describe(written), ", which ", ranks_text(world_size), accum_text(grad_accum),
                     " cannot split evenly (the global batch is kept across a resume: resume on a number of ranks that",
                     grad_accum == 1 ? "" : ", times grad_accum,", " divides ", written.samples(), ")"));
  }
  return written.samples() / split;
}

GlobalBatch Trainer::global_batch() const {
  return {.world_size = world_size_, .batch_size = train_.batch_size(), .grad_accum = config_.grad_accum};
}

Checkpoint Trainer::checkpoint() const {
  Checkpoint c;
  c.model = deep_copy(model_.named_parameters());
  c.buffers = deep_copy(model_.named_buffers());
  c.optimizer = zero_ ? zero_->state_dict() : optimizer_.state_dict();  // ZeRO-1: the whole state, gathered
  if (scheduler_) c.schedule = scheduler_->state_dict();
  c.scaler = scaler_.state_dict();
  if (fp8_) c.fp8 = {.recipe = config_.fp8_recipe.str(), .tensors = fp8_->state_dict()};
  const LoaderPosition position = train_.position();
  c.trainer.step = step_;
  c.trainer.epoch = position.epoch;
  c.trainer.batch = position.batch;
  c.trainer.global_batch = global_batch();
  c.trainer.generators["default"] = default_generator().state();
  c.data = data_;
  c.meta.precision = precision_name(config_.precision);
  c.meta.config_json = config_.config_json;
  c.meta.wall_s = wall_s();
  return c;
}

absl::Status Trainer::restore(const Checkpoint& whole, const std::string& path) {
  // With ZeRO-1 the optimizer holds this rank's slices: it takes its part of the whole state.
  Checkpoint sharded;
  absl::Status sharding;
  if (zero_) {
    sharded = whole;
    try {
      sharded.optimizer = zero_->shard_state(whole.optimizer);
    } catch (const Error& e) {
      sharding = absl::FailedPreconditionError(absl::StrCat(path, ": ", e.what()));
    }
  }
  const Checkpoint& c = zero_ ? sharded : whole;
  // Everything is checked before anything changes.
  const absl::Status compatible = sharding.ok() ? check_compatible(path, c, model_, optimizer_) : sharding;
  if (ddp_) {
    // Every rank read its own copy: they must agree on where the run stands (e.g. "latest" resolved in
    // different folders on different machines would silently train diverged replicas). A rank whose copy
    // does not fit comes here too (and resume() for one it could not read), so that no rank is left waiting
    // in a collective the others never make: the others fail naming it.
    const int64_t mine = compatible.ok() ? c.trainer.step : kCannotRestore;
    if (const std::optional<RankDisagreement> d = ranks_disagree(*config_.process_group, mine)) {
      if (!compatible.ok()) return compatible;
      if (d->value == kCannotRestore || d->rank0_value == kCannotRestore) {
        return absl::FailedPreconditionError(absl::StrCat(
            path, ": rank ", d->rank0_value == kCannotRestore ? 0 : d->rank,
            " cannot restore its checkpoint (its own error says why; every rank must read the same checkpoint)"));
      }
      return absl::FailedPreconditionError(absl::StrCat(path, ": rank ", d->rank, " resumes at step ", d->value,
                                                        " but rank 0 at step ", d->rank0_value,
                                                        " (every rank must read the same checkpoint)"));
    }
  }
  if (!compatible.ok()) return compatible;
  if (c.meta.precision != precision_name(config_.precision)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": written by a run in ", c.meta.precision,
                                                      "; this run is in ", precision_name(config_.precision),
                                                      " (resume with the precision the run started with)"));
  }
  if (c.schedule.has_value() != scheduler_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, c.schedule ? ": has an lr schedule state but this run has no schedule"
                                      : ": has no lr schedule state but this run has a schedule"));
  }
  if (c.schedule && c.schedule->base_lrs.size() != optimizer_.num_param_groups()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": /schedule has ", c.schedule->base_lrs.size(),
                                                      " base lrs, the optimizer has ", optimizer_.num_param_groups(),
                                                      " param groups"));
  }
  // The global batch is kept across a resume, on any number of ranks; the position is counted in micro-batches
  // of the run that wrote it, which on another split of the same global batch are another number of this
  // run's (see the top of trainer.h). A file without the global batch is taken as written by this run's.
  LoaderPosition position{.epoch = c.trainer.epoch, .batch = c.trainer.batch};
  if (const std::optional<GlobalBatch>& written = c.trainer.global_batch) {
    const GlobalBatch here = global_batch();
    if (written->samples() != here.samples()) {
      absl::StatusOr<int64_t> fits = resume_batch_size(*written, here.world_size, here.grad_accum);
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": ",
          fits.ok() ? absl::StrCat("written by ", describe(*written), "; this run makes ", describe(here),
                                   ". The global batch is kept across a resume: give the training loader "
                                   "batch_size ",
                                   *fits, " (", ranks_text(here.world_size), accum_text(here.grad_accum), ")")
                    : fits.status().message()));
    }
    const int64_t samples = c.trainer.batch * written->micro_batch_samples();
    if (samples % here.micro_batch_samples() != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": /trainer position {epoch ", c.trainer.epoch, ", batch ", c.trainer.batch, "} is ", samples,
          " samples into the epoch, not a whole number of this run's micro-batches of ", here.micro_batch_samples(),
          " (", ranks_text(here.world_size), " x ", here.batch_size, "): not at an optimizer step's end"));
    }
    position.batch = samples / here.micro_batch_samples();
  }
  if (c.trainer.step < 0 || position.epoch < 0 || position.batch < 0 || position.batch > train_.batches_per_epoch()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": /trainer position {epoch ", c.trainer.epoch, ", batch ",
                                                      c.trainer.batch, "} does not fit a loader of ",
                                                      train_.batches_per_epoch(),
                                                      " batches per epoch (was the batch size or the data changed?)"));
  }
  const auto generator = c.trainer.generators.find("default");
  if (generator == c.trainer.generators.end()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": /trainer/generators has no 'default' generator"));
  }
  amp::GradScaler scaler(scaler_.options());
  // FP8 state goes into a fresh context first, so that nothing changes unless everything loads.
  std::unique_ptr<amp::Fp8Context> fp8;
  if (fp8_) {
    if (c.fp8.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": has no /fp8 scaling state but this run trains in fp8"));
    }
    if (c.fp8.recipe != config_.fp8_recipe.str()) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": written with the FP8 recipe ", c.fp8.recipe,
                                                        "; this run uses ", config_.fp8_recipe.str(),
                                                        " (resume with the recipe the run started with)"));
    }
  }
  try {
    if (fp8_) {
      fp8 = std::make_unique<amp::Fp8Context>(model_, config_.fp8_recipe, config_.fp8);
      fp8->to(device_);
      fp8->load_state_dict(c.fp8.tensors);
    }
    if (scaler_.is_enabled() && c.scaler.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": /scaler is empty (a run without loss scaling) but this run scales the loss"));
    }
    scaler.load_state_dict(c.scaler);
    optimizer_.load_state_dict(c.optimizer);  // validates everything before it changes anything
  } catch (const Error& e) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", e.what()));
  }
  // From here nothing can fail.
  std::vector<NamedTensor> state = c.model;
  state.insert(state.end(), c.buffers.begin(), c.buffers.end());
  model_.load_state_dict(state);
  scaler_ = scaler;
  if (fp8) fp8_ = std::move(fp8);
  if (scheduler_) scheduler_->load_state_dict(*c.schedule);
  optimizer_.refresh_working_copies();
  if (zero_) zero_->refresh_working_copies();
  train_.set_position(position);
  default_generator().set_state(generator->second);
  for (const auto& [name, blob] : c.data) data_[name] = blob;
  step_ = c.trainer.step;
  wall_before_ = c.meta.wall_s;
  resumed_ = true;
  last_epoch_ = position.batch > 0 ? position.epoch : std::max<int64_t>(0, position.epoch - 1);
  last_eval_step_ = -1;
  return absl::OkStatus();
}

absl::Status Trainer::write_checkpoint() {
  profiler::RecordScope phase("checkpoint", profiler::Category::kPhase);
  if (!checkpoints_) {  // not rank 0: with ZeRO-1 it hands rank 0 its shards of the optimizer's state
    if (zero_) (void)zero_->state_dict();
    last_checkpoint_step_ = step_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> written = checkpoints_->write(checkpoint());
  if (!written.ok()) return written.status();
  last_checkpoint_step_ = step_;
  last_checkpoint_ = *written;
  sinks_.flush();
  return absl::OkStatus();
}

absl::StatusOr<std::string> Trainer::checkpoint_at_stop() {
  absl::Status written;
  if (!config_.checkpoint_dir.empty() && last_checkpoint_step_ != step_) written = write_checkpoint();
  if (ddp_) {
    // The ranks wait for rank 0's checkpoint: none exits (and mpirun ends the job) while it is written, and
    // a failed write fails them all. Only rank 0 writes, so a rank whose status differs from its is rank 0
    // having failed.
    const bool rank0_failed = ranks_disagree(*config_.process_group, written.ok() ? 0 : 1).has_value();
    if (written.ok() && rank0_failed) {
      return absl::InternalError(
          absl::StrCat("stopped at step ", step_, " but rank 0 could not write the checkpoint (its error says why)"));
    }
  }
  if (!written.ok()) return written;
  return last_checkpoint_step_ == step_ ? last_checkpoint_ : std::string();
}

absl::Status Trainer::save_checkpoint(const std::string& path) const {
  return mantissa::save_checkpoint(path, checkpoint());
}

absl::Status Trainer::resume(const std::string& path) {
  absl::StatusOr<std::string> resolved = resolve_resume(path, config_.checkpoint_dir);
  absl::StatusOr<Checkpoint> c = resolved.ok() ? load_checkpoint(*resolved) : resolved.status();
  if (!c.ok()) {
    // The ranks that read theirs wait in restore()'s agreement on the step: meet them there.
    if (ddp_) ranks_disagree(*config_.process_group, kCannotRestore);
    return c.status();
  }
  return restore(*c, *resolved);
}

}  // namespace mantissa
