// TrainerConfig's checks and the GradScaler options it implies (train/trainer.h).
#include <cmath>

#include "framework/error.h"
#include "train/trainer.h"

namespace mantissa {

void check_trainer_config(const TrainerConfig& c) {
  MT_CHECK(c.epochs >= 0 && c.max_steps >= 0, "Trainer: epochs (", c.epochs, ") and max_steps (", c.max_steps,
           ") must be >= 0");
  MT_CHECK(c.epochs > 0 || c.max_steps > 0,
           "Trainer: neither epochs nor max_steps is set, the run would never end. HINT: set one of them");
  MT_CHECK(c.grad_accum >= 1, "Trainer: grad_accum must be >= 1, got ", c.grad_accum);
  MT_CHECK(c.zero_stage == 0 || c.zero_stage == 1, "Trainer: zero_stage must be 0 (plain data parallelism) or 1 ",
           "(ZeRO-1: sharded optimizer state), got ", c.zero_stage);
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
amp::GradScalerOptions trainer_scaler_options(const TrainerConfig& c) {
  amp::GradScalerOptions o = c.scaler ? *c.scaler : amp::scaler_defaults_for(precision_dtype(c.precision));
  if (o.process_group == nullptr) o.process_group = c.process_group;
  return o;
}

}  // namespace mantissa
