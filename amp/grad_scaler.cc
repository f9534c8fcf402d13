// GradScaler over optim's grad-scaling passes (unscale_grads_, check_grads_finite_, the fused step).
#include "amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "amp/unscale_grads.h"
#include "framework/dist/process_group.h"
#include "framework/error.h"
#include "framework/profiler/profiler.h"
#include "ops/elementwise/elementwise.h"

namespace mantissa::amp {
namespace {

const char* const kPyTorchKeys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"};
const char* const kExtensionKeys[] = {"hysteresis", "hysteresis_refill",      "min_scale",
                                      "max_scale",  "_consecutive_overflows", "_hysteresis_overflows",
                                      "_steps",     "_skipped_steps",         "_last_overflow_step"};

// The grads the passes may touch: fp32/f64 (a 16-bit grad would lose what unscaling recovers) and
// contiguous. A strided grad (a transposed or sliced view) is replaced by a contiguous copy first: the
// passes work in place over flat memory, and the optimizer reads grads by value.
void prepare_grads(const Optimizer& optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const auto& p : optimizer.group_params(g)) {
      const Tensor& grad = p.tensor.grad();
      if (!grad.defined()) continue;
      MT_CHECK(grad.dtype() == DType::kF32 || grad.dtype() == DType::kF64,
               "GradScaler: attempting to unscale FP16 gradients: the grad of '", p.name, "' is ",
               dtype_name(grad.dtype()), " ", shape_str(grad.shape()),
               ". HINT: keep fp32 master weights; autocast makes the 16-bit copies and hands back fp32 grads");
      if (!grad.is_contiguous()) {
        Tensor param = p.tensor;  // a handle to the same parameter
        param.set_grad(grad.contiguous());
      }
    }
}

// Whether any parameter of `optimizer` has a grad: without one there is nothing to check for inf, and
// PyTorch's step() refuses to guess ("No inf checks were recorded for this optimizer").
bool has_grads(const Optimizer& optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    for (const auto& p : optimizer.group_params(g))
      if (p.tensor.grad().defined()) return true;
  return false;
}

size_t num_params(const Optimizer& optimizer) {
  size_t n = 0;
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) n += optimizer.group_params(g).size();
  return n;
}

}  // namespace

GradScalerOptions scaler_defaults_for(DType precision) {
  MT_CHECK(is_floating(precision) && precision != DType::kF64, "scaler_defaults_for: expected f16, bf16 or f32, got ",
           dtype_name(precision));
  GradScalerOptions o;
  o.state = precision == DType::kF16 ? ScalerState::kEnabled : ScalerState::kDisabled;
  return o;
}

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  const auto& o = options_;
  // The scale lives in f32 (as PyTorch's), so it must be finite there.
  MT_CHECK(o.init_scale > 0.0 && std::isfinite(static_cast<float>(o.init_scale)),
           "GradScaler: init_scale must be positive and finite in f32, got ", o.init_scale);
  MT_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  MT_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  MT_CHECK(o.growth_interval > 0, "GradScaler: growth_interval must be > 0, got ", o.growth_interval);
  MT_CHECK(o.hysteresis > 0, "GradScaler: hysteresis must be >= 1 (1: back off at every overflow), got ", o.hysteresis);
  MT_CHECK(o.hysteresis_refill == HysteresisRefill::kOnCleanStep || o.hysteresis_refill == HysteresisRefill::kOnGrowth,
           "GradScaler: hysteresis_refill must be kOnCleanStep or kOnGrowth, got ",
           static_cast<int>(o.hysteresis_refill));
  // Compared as stored (f32), so a saved scale sitting at min_scale loads back.
  const float init = static_cast<float>(o.init_scale);
  MT_CHECK(o.min_scale >= 0.0 && static_cast<float>(o.min_scale) <= init && init <= static_cast<float>(o.max_scale),
           "GradScaler: need 0 <= min_scale <= init_scale <= max_scale, got min_scale ", o.min_scale, ", init_scale ",
           o.init_scale, ", max_scale ", o.max_scale);
  scale_ = scalar_tensor(o.init_scale, {.dtype = DType::kF32});
  stats_.history.push_back({0, get_scale()});
}

double GradScaler::get_scale() const { return is_enabled() ? scale_.item() : 1.0; }

const Tensor& GradScaler::scale_tensor() const {
  MT_CHECK(is_enabled(), "GradScaler.scale_tensor: the scaler is disabled (it has no scale tensor)");
  return scale_;
}

Tensor GradScaler::found_inf(const Optimizer& optimizer) const {
  MT_CHECK(is_enabled(), "GradScaler.found_inf: the scaler is disabled (it checks nothing)");
  const auto it = per_optimizer_.find(&optimizer);
  MT_CHECK(it != per_optimizer_.end() && it->second.found_inf.defined(), "GradScaler.found_inf: no inf check of this ",
           optimizer.type_name(), " optimizer was recorded since the last update(). HINT: ask after step() (or ",
           "enqueue_step) and before update()");
  return it->second.found_inf;
}

void GradScaler::set_scale(double scale) {
  if (on_device()) return set_scale_cuda(scale);
  fill_(scale_, scale);
  const double now = scale_.item();  // as stored (f32)
  if (stats_.history.empty() || stats_.history.back().scale != now) {
    if (stats_.history.size() >= options_.history_capacity && !stats_.history.empty())
      stats_.history.erase(stats_.history.begin());
    if (options_.history_capacity > 0) stats_.history.push_back({stats_.steps, now});
  }
}

Tensor GradScaler::inv_scale_tensor() const {
  // PyTorch: self._scale.double().reciprocal().float()
  return scalar_tensor(static_cast<float>(1.0 / scale_.item()), {.dtype = DType::kF32});
}

// MAX over the ranks: one rank's inf or nan makes every rank skip (found_inf is 0 or 1).
void GradScaler::agree_found_inf(const Tensor& found_inf) const {
  if (options_.process_group != nullptr && options_.process_group->size() > 1) {
    options_.process_group->all_reduce(found_inf, ReduceOp::kMax);
  }
}

Tensor GradScaler::scale(const Tensor& loss) const {
  MT_CHECK(loss.defined(), "GradScaler.scale: the loss is undefined");
  if (!is_enabled()) return loss;
  if (loss.device().is_cuda() && !on_device()) const_cast<GradScaler*>(this)->to_device(loss.device());
  return mul(loss, scale_);
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!is_enabled()) return;
  profiler::RecordScope scope("GradScaler.unscale_");
  PerOptimizer& s = per_optimizer_[&optimizer];
  MT_CHECK(s.stage != Stage::kUnscaled, "GradScaler.unscale_: unscale_() has already been called on this ",
           optimizer.type_name(), " optimizer since the last update(). HINT: call it once per iteration, ",
           "between backward and step");
  MT_CHECK(s.stage != Stage::kStepped, "GradScaler.unscale_: unscale_() is being called after step() on this ",
           optimizer.type_name(), " optimizer. HINT: unscale_ (and clip) before step(), then update()");
  if (!has_grads(optimizer)) {
    // As PyTorch's unscale_: nothing to unscale is not an error here, but no inf check is recorded, so
    // step() refuses this optimizer.
    s.stage = Stage::kUnscaled;
    return;
  }
  if (cuda_grads(optimizer)) return unscale_cuda(optimizer, s);
  prepare_grads(optimizer);
  s.found_inf = zeros({}, {.dtype = DType::kF32});
  unscale_grads_(optimizer, inv_scale_tensor(), s.found_inf);
  agree_found_inf(s.found_inf);
  s.stage = Stage::kUnscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!is_enabled()) {
    optimizer.step();
    return true;
  }
  PerOptimizer& s = per_optimizer_[&optimizer];
  MT_CHECK(s.stage != Stage::kStepped, "GradScaler.step: step() has already been called on this ",
           optimizer.type_name(), " optimizer since the last update(). HINT: call update() once per iteration");
  require_inf_check(optimizer, s);
  if (cuda_grads(optimizer)) {
    step_cuda(optimizer, s);
    return s.found_inf.item() == 0.0;  // the one host read; enqueue_step does without it
  }
  bool applied;
  if (s.stage == Stage::kUnscaled) {
    applied = s.found_inf.item() == 0.0;
    if (applied) optimizer.step();
  } else {
    // The fused path: check, then one kernel pass that unscales and updates unless found_inf is set.
    prepare_grads(optimizer);
    s.found_inf = zeros({}, {.dtype = DType::kF32});
    check_grads_finite_(optimizer, s.found_inf);
    agree_found_inf(s.found_inf);
    optimizer.step({.inv_scale = inv_scale_tensor(), .found_inf = s.found_inf});
    applied = s.found_inf.item() == 0.0;
  }
  s.stage = Stage::kStepped;
  return applied;
}

// PyTorch's "No inf checks were recorded for this optimizer": after unscale_ the check must have run (it
// runs only where there are grads); before it, the fused step's check needs grads to look at. Stepping
// anyway would report an applied update that changed nothing, and hide a broken backward.
void GradScaler::require_inf_check(const Optimizer& optimizer, const PerOptimizer& s) const {
  const bool checked = s.stage == Stage::kUnscaled ? s.found_inf.defined() : has_grads(optimizer);
  MT_CHECK(checked, "GradScaler.step: no inf checks were recorded for this ", optimizer.type_name(),
           " optimizer: none of its ", num_params(optimizer), " parameters has a grad",
           s.stage == Stage::kUnscaled ? " (unscale_ found none)" : "",
           ". HINT: call backward() on scaler.scale(loss) between zero_grad() and step(), and check that the ",
           "optimizer holds the parameters the loss was computed from (a parameter the forward never used ",
           "gets no grad)");
}

void GradScaler::enqueue_step(Optimizer& optimizer) {
  if (is_enabled() && cuda_grads(optimizer)) {
    PerOptimizer& s = per_optimizer_[&optimizer];
    MT_CHECK(s.stage != Stage::kStepped, "GradScaler.enqueue_step: step() has already been called on this ",
             optimizer.type_name(), " optimizer since the last update(). HINT: call update() once per iteration");
    require_inf_check(optimizer, s);
    return step_cuda(optimizer, s);
  }
  step(optimizer);  // the CPU reads found_inf for free
}

void GradScaler::update() {
  if (!is_enabled()) return;
  profiler::RecordScope scope("GradScaler.update");
  if (on_device()) return update_cuda();
  bool found_inf = false, any = false;
  for (const auto& [opt, s] : per_optimizer_) {
    if (!s.found_inf.defined()) continue;
    any = true;
    found_inf = found_inf || s.found_inf.item() != 0.0;
  }
  MT_CHECK(any, "GradScaler.update: no inf checks were recorded prior to update(). HINT: call step(optimizer) ",
           "(or unscale_) before update(), or update(new_scale) to set the scale directly");
  per_optimizer_.clear();

  // The shared rule (amp/loss_scale_rule.h) over this scaler's fields; the CUDA scaler runs it on the device.
  int64_t c[loss_scale::kNumCounters];
  pack_counters(c);
  const float before = static_cast<float>(scale_.item());
  float scale = before, inv_scale = 0.0f;  // inv_scale_tensor() derives it from the scale when needed
  loss_scale::apply_rule(scale, inv_scale, c, found_inf, rule());
  Counters after{0, 0, 0, std::move(stats_)};
  unpack_counters(c, after);
  growth_tracker_ = after.growth_tracker;
  consecutive_overflows_ = after.consecutive_overflows;
  hysteresis_overflows_ = after.hysteresis_overflows;
  stats_ = std::move(after.stats);
  // The rule leaves the scale alone at the floor under kThrow and records the iteration instead.
  if (c[loss_scale::kFloorOverflowStep] >= 0)
    throw_at_min_scale(c[loss_scale::kFloorOverflowStep], consecutive_overflows_);
  if (scale != before) set_scale(scale);  // recorded from the next iteration on (stats_.steps moved on)
}

void GradScaler::pack_counters(int64_t* c) const {
  loss_scale::initial_counters(c);  // kFloorOverflowStep: none pending
  c[loss_scale::kGrowthTracker] = growth_tracker_;
  c[loss_scale::kConsecutiveOverflows] = consecutive_overflows_;
  c[loss_scale::kHysteresisOverflows] = hysteresis_overflows_;
  c[loss_scale::kSteps] = stats_.steps;
  c[loss_scale::kSkippedSteps] = stats_.skipped_steps;
  c[loss_scale::kLastOverflowStep] = stats_.last_overflow_step;
}

void GradScaler::unpack_counters(const int64_t* c, Counters& into) {
  into.growth_tracker = c[loss_scale::kGrowthTracker];
  into.consecutive_overflows = c[loss_scale::kConsecutiveOverflows];
  into.hysteresis_overflows = c[loss_scale::kHysteresisOverflows];
  into.stats.steps = c[loss_scale::kSteps];
  into.stats.skipped_steps = c[loss_scale::kSkippedSteps];
  into.stats.consecutive_skips = c[loss_scale::kConsecutiveOverflows];
  into.stats.last_overflow_step = c[loss_scale::kLastOverflowStep];
}

loss_scale::Rule GradScaler::rule() const {
  return {.growth_factor = options_.growth_factor,
          .backoff_factor = options_.backoff_factor,
          .growth_interval = options_.growth_interval,
          .hysteresis = options_.hysteresis,
          .hysteresis_refill = options_.hysteresis_refill,
          .min_scale = options_.min_scale,
          .max_scale = options_.max_scale,
          .throw_at_min_scale = options_.on_min_scale == OnMinScale::kThrow};
}

void GradScaler::throw_at_min_scale(int64_t iteration, int64_t consecutive_skips) const {
  MT_THROW("GradScaler.update: an overflow at step ", iteration, " with the scale already at min_scale ",
           options_.min_scale, " (", consecutive_skips, " skipped steps in a row): the gradients ",
           "are inf/nan whatever the scale, so training is diverging. HINT: lower the learning rate, ",
           "check the data for inf/nan, or train in bf16");
}

void GradScaler::update(double new_scale) {
  if (!is_enabled()) return;
  MT_CHECK(new_scale > 0.0 && std::isfinite(static_cast<float>(new_scale)), "GradScaler.update: new_scale must ",
           "be positive and finite in f32, got ", new_scale);
  per_optimizer_.clear();
  set_scale(new_scale);
}

int64_t GradScaler::growth_tracker() const { return counters().growth_tracker; }

GradScalerStats GradScaler::stats() const {
  const Counters c = counters();
  GradScalerStats out = c.stats;
  out.scale = get_scale();
  out.hysteresis_left = options_.hysteresis - c.hysteresis_overflows;
  return out;
}

GradScalerState GradScaler::state_dict() const {
  if (!is_enabled()) return {};
  const Counters c = counters();
  return {{"scale", scale_.item()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", double(options_.growth_interval)},
          {"_growth_tracker", double(c.growth_tracker)},
          {"hysteresis", double(options_.hysteresis)},
          {"hysteresis_refill", double(static_cast<int>(options_.hysteresis_refill))},
          {"min_scale", options_.min_scale},
          {"max_scale", options_.max_scale},
          {"_consecutive_overflows", double(c.consecutive_overflows)},
          {"_hysteresis_overflows", double(c.hysteresis_overflows)},
          {"_steps", double(c.stats.steps)},
          {"_skipped_steps", double(c.stats.skipped_steps)},
          {"_last_overflow_step", double(c.stats.last_overflow_step)}};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  if (!is_enabled()) return;
  MT_CHECK(!state.empty(), "GradScaler.load_state_dict: the state is empty, possibly because it was saved ",
           "from a disabled GradScaler");
  for (const char* key : kPyTorchKeys)
    MT_CHECK(state.count(key), "GradScaler.load_state_dict: entry '", key, "' is missing");
  for (const auto& [key, value] : state) {
    bool known = false;
    for (const char* k : kPyTorchKeys) known = known || key == k;
    for (const char* k : kExtensionKeys) known = known || key == k;
    MT_CHECK(known, "GradScaler.load_state_dict: unexpected entry '", key, "' = ", value);
  }
  // Validate through the constructor's checks before changing anything.
  GradScalerOptions o = options_;
  o.init_scale = state.at("scale");
  o.growth_factor = state.at("growth_factor");
  o.backoff_factor = state.at("backoff_factor");
  o.growth_interval = static_cast<int64_t>(state.at("growth_interval"));
  auto get = [&](const char* key, double fallback) { return state.count(key) ? state.at(key) : fallback; };
  o.hysteresis = static_cast<int64_t>(get("hysteresis", double(o.hysteresis)));
  if (state.count("hysteresis_refill")) {
    const double refill = state.at("hysteresis_refill");
    MT_CHECK(refill == static_cast<int>(HysteresisRefill::kOnCleanStep) ||
                 refill == static_cast<int>(HysteresisRefill::kOnGrowth),
             "GradScaler.load_state_dict: 'hysteresis_refill' = ", refill, " is neither kOnCleanStep (",
             static_cast<int>(HysteresisRefill::kOnCleanStep), ") nor kOnGrowth (",
             static_cast<int>(HysteresisRefill::kOnGrowth), ")");
    o.hysteresis_refill = static_cast<HysteresisRefill>(static_cast<int>(refill));
  } else if (state.count("hysteresis")) {
    // A mantissa state saved before the option existed ran kOnCleanStep (also the default). A PyTorch
    // state has neither key and keeps this scaler's rule, as it keeps its hysteresis.
    o.hysteresis_refill = HysteresisRefill::kOnCleanStep;
  }
  o.min_scale = get("min_scale", 0.0);
  o.max_scale = get("max_scale", std::numeric_limits<double>::infinity());
  // Without the key (a state from before hysteresis_refill) the count is the overflows in a row: what
  // kOnCleanStep, the only rule then, counted. It never exceeds hysteresis (the rule stops counting there).
  const double consecutive = get("_consecutive_overflows", 0);
  const double counted_in_state = get("_hysteresis_overflows", consecutive);
  MT_CHECK(counted_in_state >= 0, "GradScaler.load_state_dict: '_hysteresis_overflows' must be >= 0, got ",
           counted_in_state);
  const int64_t counted = std::min(static_cast<int64_t>(counted_in_state), o.hysteresis);
  GradScaler checked(o);
  options_ = o;
  fill_(scale_, o.init_scale);
  growth_tracker_ = static_cast<int64_t>(state.at("_growth_tracker"));
  consecutive_overflows_ = static_cast<int64_t>(consecutive);
  hysteresis_overflows_ = counted;
  stats_.steps = static_cast<int64_t>(get("_steps", 0));
  stats_.skipped_steps = static_cast<int64_t>(get("_skipped_steps", 0));
  stats_.last_overflow_step = static_cast<int64_t>(get("_last_overflow_step", -1));
  stats_.consecutive_skips = consecutive_overflows_;
  stats_.history = {{stats_.steps, scale_.item()}};
  if (on_device()) counters_to_device(o.init_scale);
  per_optimizer_.clear();
}

}  // namespace mantissa::amp
