// Optimizer: the base of SGD, Adam, AdamW and Lion. Param groups with per-group options, per-parameter state
// keyed by the parameter's dotted name (never its address), zero_grad, and state save/load as plain data
// (OptimizerState) that a checkpoint stores. Also the fused entry for the GradScaler (GradScaling).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "framework/module.h"
#include "optim/cpu/ladder_kernels.h"
#include "optim/cpu/optim_kernels.h"
#include "optim/precision_ladder.h"

namespace mantissa {

// A parameter's state: named tensors, e.g. {"step": i64 scalar, "exp_avg": like the param}. Every
// optimizer keeps a "step" count per parameter; the kernels read and advance it in memory, so a step the
// scaler skips (found_inf on the device) leaves it untouched without the host looking.
using ParamState = std::map<std::string, Tensor>;

// The GradScaler's values for the fused step, both f32 scalar tensors on the parameters' device:
// grads are multiplied by inv_scale inside the update, and when found_inf is 1 nothing changes at all
// (parameters, moments, step counts). The kernels read them through pointers, never on the host.
struct GradScaling {
  Tensor inv_scale;
  Tensor found_inf;
};

// zero_grad: kSetToNone drops each grad (PyTorch's default since 2.0; the next backward writes a fresh
// one); kZero fills existing grads with zeros in place.
enum class ZeroGrad { kSetToNone, kZero };

// Plain data for checkpoints. A group lists its parameter names (in order) and its hyperparameters by
// name (booleans as 0/1, betas as beta1/beta2). `tensors` is flat: "<param name>/<state name>", e.g.
// "0.weight/exp_avg", "0.weight/step". A parameter that never stepped has no entries.
struct ParamGroupState {
  std::vector<std::string> params;
  std::map<std::string, double> hyperparameters;
};
struct OptimizerState {
  std::string optimizer;  // "SGD", "Adam", "AdamW", "Lion": load refuses another type's state
  // The precision ladder the state was written under (PrecisionLadder::str(); empty: the default, fp32 masters and
  // fp32 state, as every state from before the ladder): load refuses another ladder's state.
  std::string ladder;
  std::vector<ParamGroupState> groups;
  std::map<std::string, Tensor> tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual const char* type_name() const = 0;

  // One update of every parameter that has a grad; a parameter whose grad is undefined is skipped
  // (no state is created for it).
  void step();
  // The fused form: the same update on grads * inv_scale, in the same pass, and nothing at all when
  // found_inf is 1. Bit-identical to unscaling the grads first and calling step().
  void step(const GradScaling& scaling);
  void zero_grad(ZeroGrad mode = ZeroGrad::kSetToNone);

  // Persistent working copies (beyond PyTorch): every fp32 parameter gets an f16 or bf16 copy that autocast
  // uses instead of casting the master again in every forward (amp::set_working_copy); each applied step
  // refreshes the copies in the update kernel's own pass (a skipped step leaves them, like the masters,
  // untouched).
  // Results are bit-identical to re-casting. Call refresh_working_copies() after changing parameters outside
  // step() (e.g. loading weights).
  void enable_working_copies(DType dtype);
  void disable_working_copies();
  void refresh_working_copies();
  // The working copy of parameter `name`; undefined when working copies are off.
  Tensor working_copy(const std::string& name) const;

  // ZeRO-1 (train/zero.h): from now on this optimizer updates, and keeps state for, only the flat element
  // range [begin, end) of each parameter named in `owned`; a parameter absent from it (or with an empty
  // range) leaves its group. Each range becomes a parameter of its own: a 1-D leaf with the parameter's name
  // that shares the parameter's storage, so a step updates those elements of the parameter in place and
  // state_dict() holds 1-D state of the ranges. Groups keep their options and may become empty. Call it
  // before the first step (the optimizer must hold no state) and with working copies off. Under a precision ladder
  // other than the default a range starts at a multiple of the 8-bit state's 2048-block, so a shard's blocks are
  // the whole parameter's, and it rounds stochastically with the whole parameter's random numbers.
  struct OwnedRange {
    int64_t begin = 0, end = 0;
  };
  void shard(const std::map<std::string, OwnedRange>& owned);

  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<NamedTensor>& group_params(size_t group) const;
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;

  // The state tensors (besides "step") a parameter of group `group` has under its current options and the precision
  // ladder: the optimizer's buffers, with 8-bit state each buffer's "<name>.absmax", with Kahan "compensation".
  std::vector<std::string> state_names(size_t group) const {
    return ladder_entries(state_buffers(group_hyperparameters(group)));
  }

  // The shape and dtype of state entry `entry` (a buffer, a ".absmax", "compensation" or "step") of `param` under this
  // optimizer's ladder (a state_dict() entry of a whole parameter has this form).
  struct StateSpec {
    Shape shape;
    DType dtype;
  };
  StateSpec state_spec(const Tensor& param, const std::string& entry) const;

  // The precision ladder (optim/precision_ladder.h) every constructor takes: fp32 masters and fp32 state unless
  // told otherwise.
  const PrecisionLadder& precision_ladder() const { return ladder_; }

  // The state of parameter `name`, or null before its first step (or if it is not optimized here).
  const ParamState* state(const std::string& name) const;

  // A deep copy of the hyperparameters and state (later steps do not change it).
  OptimizerState state_dict() const;
  // Replaces every group's hyperparameters and all state with copies of `state`. The parameters stay
  // this optimizer's own; their names must match group by group. Throws, before changing anything, naming
  // the first missing, unexpected or mismatched entry.
  void load_state_dict(const OptimizerState& state);

 protected:
  Optimizer() = default;
  std::string step_event_name() const;
  // Sets the ladder; constructors call it before adding their first group (the groups' dtypes are checked
  // against it).
  void set_precision_ladder(const PrecisionLadder& ladder);
  // Checks and appends a group's parameters (no name may repeat across groups; leaves that require grad, fp32/f64
  // under fp32 masters, bf16 under master_weights=none); returns the new group's index.
  size_t add_group_params(std::vector<NamedTensor> params);
  ParamState& mutable_state(const std::string& name) { return state_[name]; }
  // A parameter's state, created on first use with "step" = 0 and zero tensors named `buffers` (each stored as the
  // ladder says, with its absmax or the compensation where the ladder has them).
  ParamState& state_or_init(const NamedTensor& param, const std::vector<std::string>& buffers);
  // Adds buffer `name` (zeros, stored as the ladder says) to a parameter's state, or removes it (an option that
  // switched amsgrad or momentum on or off).
  void add_state_buffer(ParamState& s, const Tensor& param, const std::string& name) const;
  static void erase_state_buffer(ParamState& s, const std::string& name);
  // `buffers` with the ladder's entries: "<buffer>.absmax" for 8-bit state, "compensation" for Kahan.
  std::vector<std::string> ladder_entries(std::vector<std::string> buffers) const;
  // One group's step under a non-default ladder: per parameter with a grad, its state (`buffers`, created on first
  // use), then the device's ladder kernel (cpu::ladder_step per parameter, or optim/cuda/ladder.cu's fused launch)
  // running `op`.
  void ladder_step_group(size_t group, const GradScaling* scaling, const std::vector<std::string>& buffers,
                         const cpu::LadderOp& op);
  // The parameters of `group` that have a grad, each with its grad (contiguous, checked to have the
  // parameter's shape and dtype).
  struct ParamWithGrad {
    const NamedTensor& param;
    Tensor grad;
  };
  std::vector<ParamWithGrad> params_with_grad(size_t group) const;
  // The kernel's view of parameter `name`'s working copy (null when working copies are off).
  cpu::WorkingCopyOut working_copy_out(const std::string& name) const;
  // The kernel's view of `scaling` (null pointers for a plain step).
  static cpu::ScalingPointers scaling_pointers(const GradScaling* scaling);
  // The one device of a group's parameters with grads (CPU when there are none), after checking that every
  // parameter, its grad and `scaling`'s tensors are on it (kernels read them through raw pointers, one
  // kernel call per group) and that a CUDA parameter is f32 (the CUDA kernels' type).
  Device step_device(const std::vector<ParamWithGrad>& params, const GradScaling* scaling) const;

  // Updates group `group`'s parameters; `scaling` is null for the plain step.
  virtual void step_group(size_t group, const GradScaling* scaling) = 0;
  // The group's options by field name; a check that a map holds exactly the option names and valid
  // values; and setting a group's options from a checked map.
  virtual std::map<std::string, double> group_hyperparameters(size_t group) const = 0;
  virtual void check_hyperparameters(const std::map<std::string, double>& h) const = 0;
  virtual void set_group_hyperparameters(size_t group, const std::map<std::string, double>& h) = 0;
  // The state tensors (besides "step") a parameter has under hyperparameters `h`.
  virtual std::vector<std::string> state_buffers(const std::map<std::string, double>& h) const = 0;

 private:
  std::vector<std::vector<NamedTensor>> groups_;
  std::map<std::string, ParamState> state_;
  std::map<std::string, Tensor> working_copies_;  // by parameter name
  PrecisionLadder ladder_;
  // After shard(): each owned range's first element in its whole parameter (LadderParam::first), by name.
  std::map<std::string, int64_t> shard_first_;
};

// An OptimizerState entry's key "<param name>/<state name>" in its two parts; a key without '/' throws
// mantissa::Error naming `optimizer` and the key.
struct StateKey {
  std::string param, state;
};
StateKey split_state_key(const char* optimizer, const std::string& key);

// Checks that a hyperparameter map has exactly `names`; the error names `optimizer` and the entry.
void check_hyperparameter_names(const char* optimizer, const std::map<std::string, double>& h,
                                const std::vector<std::string>& names);

// The layer between Optimizer and a concrete optimizer: groups carry an `Options` struct. Options
// provides `template <class Self, class F> static void fields(Self& o, F&& f)` calling f(name, member)
// for each double or bool member, which gives the hyperparameter map both ways.
template <typename Options>
class OptimizerWithOptions : public Optimizer {
 public:
  // Adds a group with its own options (e.g. no weight decay for biases). A parameter already in the
  // optimizer is an error.
  void add_param_group(std::vector<NamedTensor> params, Options options) {
    options.validate(type_name());
    add_group_params(std::move(params));
    options_.push_back(options);
  }
  const Options& options(size_t group = 0) const { return options_.at(group); }
  Options& mutable_options(size_t group = 0) { return options_.at(group); }
  double lr(size_t group) const override { return options_.at(group).lr; }
  void set_lr(size_t group, double lr) override { options_.at(group).lr = lr; }

 protected:
  std::map<std::string, double> group_hyperparameters(size_t group) const override {
    std::map<std::string, double> h;
    Options::fields(options_.at(group), [&](const char* name, const auto& v) { h[name] = double(v); });
    return h;
  }
  static std::vector<std::string> field_names() {
    std::vector<std::string> names;
    Options o{};
    Options::fields(o, [&](const char* name, auto&) { names.push_back(name); });
    return names;
  }
  static Options from_map(const std::map<std::string, double>& h) {
    Options o{};
    Options::fields(o, [&](const char* name, auto& v) { v = static_cast<std::decay_t<decltype(v)>>(h.at(name)); });
    return o;
  }
  void check_hyperparameters(const std::map<std::string, double>& h) const override {
    check_hyperparameter_names(type_name(), h, field_names());
    from_map(h).validate(type_name());
  }
  void set_group_hyperparameters(size_t group, const std::map<std::string, double>& h) override {
    options_.at(group) = from_map(h);
  }

  std::vector<Options> options_;
};

}  // namespace mantissa
