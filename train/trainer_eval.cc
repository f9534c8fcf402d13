// Trainer::evaluate: the eval loader's batches split among the ranks (rank r takes batches r, r + W, ...),
// each evaluated whole under the run's autocast without grad, and the sums added over the ranks, so that N
// ranks report what one process would. The loop is in train/trainer.cc.
#include <optional>
#include <vector>

#include "framework/autograd.h"
#include "framework/error.h"
#include "framework/profiler/profiler.h"
#include "train/ddp.h"
#include "train/trainer.h"

namespace mantissa {

EvalMetrics Trainer::evaluate() {
  profiler::RecordScope phase("eval", profiler::Category::kPhase);
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

}  // namespace mantissa
