// Optimizer base: groups, name-keyed state, zero_grad, and state_dict / load_state_dict with errors that
// name the entry at fault.
#include "optim/optimizer.h"

#include <algorithm>
#include <set>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "framework/error.h"
#include "framework/profiler/profiler.h"
#include "ops/autocast.h"
#include "optim/cuda/fused_optim_entries.h"
#include "optim/group_step.h"
#include "optim/low_precision.h"

namespace mantissa {
namespace {

void cpu_ladder_step(Device, std::span<const cpu::LadderParam> params, const PrecisionLadder& ladder,
                     const cpu::LadderOp& op, cpu::ScalingPointers scaling) {
  for (const cpu::LadderParam& t : params) cpu::ladder_step(t, ladder, op, scaling);
}

constexpr DeviceKernels<LadderStepKernel> kLadderStep{.cpu = &cpu_ladder_step,
                                                      .cuda = MT_CUDA_KERNEL(cuda_ladder_step)};

std::string join(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out + "]";
}

std::vector<std::string> names_of(const std::vector<NamedTensor>& params) {
  std::vector<std::string> names;
  for (const auto& p : params) names.push_back(p.name);
  return names;
}

}  // namespace

StateKey split_state_key(const char* optimizer, const std::string& key) {
  const size_t slash = key.rfind('/');
  MT_CHECK(slash != std::string::npos, optimizer, ".load_state_dict: unexpected entry '", key,
           "' (entries are '<param name>/<state name>')");
  return {key.substr(0, slash), key.substr(slash + 1)};
}

void check_hyperparameter_names(const char* optimizer, const std::map<std::string, double>& h,
                                const std::vector<std::string>& names) {
  for (const auto& name : names)
    MT_CHECK(h.count(name), optimizer, ".load_state_dict: hyperparameter '", name, "' is missing");
  const std::set<std::string> known(names.begin(), names.end());
  for (const auto& [name, value] : h)
    MT_CHECK(known.count(name), optimizer, ".load_state_dict: unexpected hyperparameter '", name, "' = ", value, "; ",
             optimizer, " has ", join(names), ". HINT: was this state saved by another optimizer?");
}

size_t Optimizer::add_group_params(std::vector<NamedTensor> params) {
  const char* type = type_name();
  MT_CHECK(!params.empty(), type, ": a param group needs at least one parameter");
  std::set<std::string> seen;
  for (const auto& group : groups_)
    for (const auto& p : group) seen.insert(p.name);
  for (const auto& [name, t] : params) {
    MT_CHECK(!name.empty() && name.find('/') == std::string::npos, type, ": parameter name '", name,
             "' must be non-empty and contain no '/' (state is saved as '<name>/<state>')");
    MT_CHECK(seen.insert(name).second, type, ": parameter '", name,
             "' is given twice (a parameter belongs to one group only)");
    MT_CHECK(t.defined() && t.is_leaf() && t.requires_grad(), type, ": parameter '", name,
             "' must be a leaf tensor that requires grad. HINT: pass model.named_parameters()");
    if (ladder_.master_weights == MasterWeights::kFp32) {
      MT_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF64, type, ": parameter '", name, "' is ",
               dtype_name(t.dtype()), " ", shape_str(t.shape()),
               "; with master_weights=fp32 optimizers update fp32 (or f64) master weights. HINT: keep the masters in "
               "fp32 and let autocast make the 16-bit working copies, or train bf16 weights with master_weights=none");
    } else {
      MT_CHECK(t.dtype() == DType::kBF16, type, ": parameter '", name, "' is ", dtype_name(t.dtype()), " ",
               shape_str(t.shape()), "; master_weights=none updates bf16 weights in place",
               t.dtype() == DType::kF16 ? " (f16 weights without masters are not supported: their 5 exponent bits "
                                          "need a loss scaler and an f16 rounding rule this ladder does not have)"
                                        : "",
               ". HINT: model.to(kBF16) before making the optimizer, or master_weights=fp32");
    }
    MT_CHECK(t.is_contiguous(), type, ": parameter '", name, "' ", shape_str(t.shape()), " is not contiguous. ",
             "HINT: register a contiguous tensor (x.contiguous()) as the parameter");
  }
  groups_.push_back(std::move(params));
  return groups_.size() - 1;
}

void Optimizer::shard(const std::map<std::string, OwnedRange>& owned) {
  MT_CHECK(state_.empty(), type_name(), ".shard: the optimizer already holds state (", state_.size(),
           " parameters). HINT: shard it before its first step and load state after");
  MT_CHECK(working_copies_.empty(), type_name(),
           ".shard: working copies are on. HINT: shard first; ZeRO-1 keeps "
           "the working copies of the whole parameters itself");
  std::set<std::string> known;
  for (auto& group : groups_) {
    std::vector<NamedTensor> mine;
    for (const NamedTensor& p : group) {
      known.insert(p.name);
      const auto it = owned.find(p.name);
      if (it == owned.end() || it->second.end == it->second.begin) continue;
      const auto [begin, end] = it->second;
      MT_CHECK(0 <= begin && begin < end && end <= p.tensor.numel(), type_name(), ".shard: range [", begin, ", ", end,
               ") of parameter '", p.name, "' is outside its ", p.tensor.numel(), " elements");
      MT_CHECK(ladder_.is_default() || begin % low_precision::kQuantBlock == 0, type_name(), ".shard: range [", begin,
               ", ", end, ") of parameter '", p.name, "' starts inside a ", low_precision::kQuantBlock,
               "-element block of the precision ladder (", ladder_.str(),
               "). HINT: cut shards at multiples of the block, as ZeroRedundancy does");
      shard_first_[p.name] = begin;
      // A view of the detached parameter has no history: a leaf, which the optimizer may own.
      Tensor slice = p.tensor.detach().view({p.tensor.numel()}).narrow(0, begin, end - begin);
      slice.set_requires_grad(true);
      mine.push_back({p.name, slice});
    }
    group = std::move(mine);
  }
  for (const auto& [name, range] : owned)
    MT_CHECK(known.count(name), type_name(), ".shard: no parameter '", name, "' in this optimizer");
}

const std::vector<NamedTensor>& Optimizer::group_params(size_t group) const {
  MT_CHECK(group < groups_.size(), type_name(), ": no param group ", group, " (there are ", groups_.size(), ")");
  return groups_[group];
}

void Optimizer::set_precision_ladder(const PrecisionLadder& ladder) {
  MT_CHECK(groups_.empty(), type_name(), ": the precision ladder is set before the first param group");
  ladder.validate(type_name());
  ladder_ = ladder;
}

std::vector<std::string> Optimizer::ladder_entries(std::vector<std::string> buffers) const {
  if (ladder_.optimizer_state == StateStorage::k8bit) {
    const size_t n = buffers.size();
    for (size_t i = 0; i < n; ++i) buffers.push_back(buffers[i] + ".absmax");
  }
  if (ladder_.master_weights == MasterWeights::kNone && ladder_.update_rounding == UpdateRounding::kKahan)
    buffers.push_back("compensation");
  return buffers;
}

Optimizer::StateSpec Optimizer::state_spec(const Tensor& param, const std::string& entry) const {
  if (entry == "step") return {Shape{}, DType::kI64};
  if (entry == "compensation") return {param.shape(), DType::kBF16};
  if (entry.ends_with(".absmax")) {
    const int64_t blocks = (param.numel() + low_precision::kQuantBlock - 1) / low_precision::kQuantBlock;
    return {Shape{blocks}, DType::kF32};
  }
  switch (ladder_.optimizer_state) {
    case StateStorage::kFp32: return {param.shape(), param.dtype() == DType::kF64 ? DType::kF64 : DType::kF32};
    case StateStorage::kBf16: return {param.shape(), DType::kBF16};
    case StateStorage::k8bit: return {param.shape(), DType::kU8};
  }
  return {param.shape(), param.dtype()};
}

void Optimizer::add_state_buffer(ParamState& s, const Tensor& param, const std::string& name) const {
  for (const std::string& entry : ladder_entries({name})) {
    if (entry == "compensation") continue;  // the parameter's, not the buffer's
    const StateSpec spec = state_spec(param, entry);
    s[entry] = zeros(spec.shape, {.dtype = spec.dtype, .device = param.device()});
  }
}

void Optimizer::erase_state_buffer(ParamState& s, const std::string& name) {
  s.erase(name);
  s.erase(name + ".absmax");
}

ParamState& Optimizer::state_or_init(const NamedTensor& param, const std::vector<std::string>& buffers) {
  ParamState& s = state_[param.name];
  if (s.empty()) {
    s["step"] = zeros({}, {.dtype = DType::kI64, .device = param.tensor.device()});
    for (const auto& b : buffers) add_state_buffer(s, param.tensor, b);
    if (ladder_.master_weights == MasterWeights::kNone && ladder_.update_rounding == UpdateRounding::kKahan)
      s["compensation"] = zeros(param.tensor.shape(), {.dtype = DType::kBF16, .device = param.tensor.device()});
  }
  return s;
}

void Optimizer::ladder_step_group(size_t group, const GradScaling* scaling, const std::vector<std::string>& buffers,
                                  const cpu::LadderOp& op) {
  const auto with_grad = params_with_grad(group);  // holds the grads (maybe contiguous copies) until launched
  const Device device = step_device(with_grad, scaling);
  const std::string name = std::string(type_name()) + ".step";
  kernel_for(name, kLadderStep, device);  // no kernel for this device: fail before touching the state
  const cpu::Storage param_storage =
      ladder_.master_weights == MasterWeights::kFp32 ? cpu::Storage::kF32 : cpu::Storage::kBF16;
  std::vector<cpu::LadderParam> list;
  for (const auto& [param, grad] : with_grad) {
    MT_CHECK(param.tensor.dtype() != DType::kF64, type_name(), ".step: parameter '", param.name,
             "' is f64; the precision ladder (", ladder_.str(), ") stores f32 or bf16 weights");
    ParamState& s = state_or_init(param, buffers);
    cpu::LadderParam t{.param = {.data = param.tensor.data_ptr(), .storage = param_storage},
                       .grad = grad.data_ptr(),
                       .step = s.at("step").data<int64_t>(),
                       .n = param.tensor.numel(),
                       .stream = ladder_stream(param.name),
                       .first = shard_first_.count(param.name) ? shard_first_.at(param.name) : 0,
                       .copy = working_copy_out(param.name)};
    if (s.count("compensation")) t.compensation = static_cast<uint16_t*>(s.at("compensation").data_ptr());
    for (const std::string& b : buffers) {
      cpu::LadderBuffer& out = t.state[t.num_state++];
      out.data = s.at(b).data_ptr();
      switch (ladder_.optimizer_state) {
        case StateStorage::kFp32: out.storage = cpu::Storage::kF32; break;
        case StateStorage::kBf16: out.storage = cpu::Storage::kBF16; break;
        case StateStorage::k8bit:
          // Adam's second moments are never negative: the unsigned map spends all 8 bits on magnitudes.
          out.storage =
              b == "exp_avg_sq" || b == "max_exp_avg_sq" ? cpu::Storage::kU8Unsigned : cpu::Storage::kU8Signed;
          out.absmax = s.at(b + ".absmax").data<float>();
          break;
      }
    }
    list.push_back(t);
  }
  dispatch(name, kLadderStep, device, device, std::span<const cpu::LadderParam>(list), ladder_, op,
           scaling_pointers(scaling));
}

std::vector<Optimizer::ParamWithGrad> Optimizer::params_with_grad(size_t group) const {
  std::vector<ParamWithGrad> out;
  for (const auto& p : groups_.at(group)) {
    const Tensor& g = p.tensor.grad();
    if (!g.defined()) continue;
    MT_CHECK(g.shape() == p.tensor.shape() && g.dtype() == p.tensor.dtype(), type_name(), ".step: the grad of '",
             p.name, "' is ", dtype_name(g.dtype()), " ", shape_str(g.shape()), " but the parameter is ",
             dtype_name(p.tensor.dtype()), " ", shape_str(p.tensor.shape()));
    out.push_back({p, g.contiguous()});  // a grad may be an expanded or strided view
  }
  return out;
}

cpu::ScalingPointers Optimizer::scaling_pointers(const GradScaling* scaling) {
  if (scaling == nullptr) return {};
  return {.inv_scale = scaling->inv_scale.data<float>(), .found_inf = scaling->found_inf.data<float>()};
}

Device Optimizer::step_device(const std::vector<ParamWithGrad>& params, const GradScaling* scaling) const {
  const Device device = params.empty() ? kCPU : params.front().param.tensor.device();
  for (const auto& [param, grad] : params) {
    const Device here = param.tensor.device();
    MT_CHECK(here == device, type_name(), ".step: parameter '", param.name, "' is on ", here.str(),
             " but others of its group on ", device.str(), ". HINT: one param group, one device");
    MT_CHECK(grad.device() == device, type_name(), ".step: the grad of '", param.name, "' is on ", grad.device().str(),
             " but the parameter on ", device.str());
    if (scaling != nullptr)
      MT_CHECK(scaling->inv_scale.device() == device && scaling->found_inf.device() == device, type_name(),
               ".step: inv_scale (", scaling->inv_scale.device().str(), ") and found_inf (",
               scaling->found_inf.device().str(), ") must be on parameter '", param.name, "''s device ", device.str(),
               ". HINT: the GradScaler keeps them on the device of the grads it unscales");
    MT_CHECK(device.is_cpu() || param.tensor.dtype() == DType::kF32 || param.tensor.dtype() == DType::kBF16,
             type_name(), ".step: parameter '", param.name, "' is ", dtype_name(param.tensor.dtype()), " on ",
             device.str(), "; the CUDA optimizers update f32 masters or (master_weights=none) bf16 weights");
  }
  return device;
}

Optimizer::~Optimizer() { disable_working_copies(); }

// The profiler's name of a step, as torch.profiler's ("Optimizer.step#Adam.step"); built only while it records.
std::string Optimizer::step_event_name() const {
  return profiler::is_enabled() ? std::string("Optimizer.step#") + type_name() + ".step" : std::string();
}

void Optimizer::step() {
  profiler::RecordScope scope(step_event_name());
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) step_group(g, nullptr);  // the kernels also write working copies
}

void Optimizer::enable_working_copies(DType dtype) {
  MT_CHECK(is_low_precision(dtype), type_name(), ".enable_working_copies: dtype must be f16 or bf16, got ",
           dtype_name(dtype));
  disable_working_copies();
  for (const auto& group : groups_) {
    for (const NamedTensor& p : group) {
      if (p.tensor.dtype() != DType::kF32) continue;  // f64 masters are never autocast
      working_copies_[p.name] = amp::make_working_copy(p.tensor, dtype);
    }
  }
}

void Optimizer::disable_working_copies() {
  for (const auto& group : groups_) {
    for (const NamedTensor& p : group) {
      if (working_copies_.count(p.name)) amp::clear_working_copy(p.tensor);
    }
  }
  working_copies_.clear();
}

void Optimizer::refresh_working_copies() {
  if (working_copies_.empty()) return;
  for (const auto& group : groups_) {
    for (const NamedTensor& p : group) {
      auto it = working_copies_.find(p.name);
      if (it != working_copies_.end()) copy_(it->second, p.tensor);  // one vectorized f32 -> 16-bit pass
    }
  }
}

cpu::WorkingCopyOut Optimizer::working_copy_out(const std::string& name) const {
  auto it = working_copies_.find(name);
  if (it == working_copies_.end()) return {};
  return {.data = it->second.data_ptr(),
          .dtype = it->second.dtype() == DType::kF16 ? cpu::CopyDType::kF16 : cpu::CopyDType::kBF16};
}

Tensor Optimizer::working_copy(const std::string& name) const {
  auto it = working_copies_.find(name);
  return it == working_copies_.end() ? Tensor() : it->second;
}

void Optimizer::step(const GradScaling& scaling) {
  for (const auto* t : {&scaling.inv_scale, &scaling.found_inf}) {
    const char* which = t == &scaling.inv_scale ? "inv_scale" : "found_inf";
    MT_CHECK(t->defined() && t->dtype() == DType::kF32 && t->numel() == 1, type_name(), ".step: ", which,
             " must be an f32 scalar tensor, got ",
             t->defined() ? std::string(dtype_name(t->dtype())) + " " + shape_str(t->shape()) : "undefined",
             ". HINT: the GradScaler passes its own inv_scale and found_inf");
  }
  profiler::RecordScope scope(step_event_name());
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) step_group(g, &scaling);  // a skipped step writes no copy either
}

void Optimizer::zero_grad(ZeroGrad mode) {
  for (auto& group : groups_)
    for (auto& p : group) {
      if (mode == ZeroGrad::kSetToNone) {
        p.tensor.set_grad(Tensor());
      } else if (p.tensor.grad().defined()) {
        fill_(p.tensor.grad(), 0.0);
      }
    }
}

const ParamState* Optimizer::state(const std::string& name) const {
  auto it = state_.find(name);
  return it == state_.end() ? nullptr : &it->second;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out{.optimizer = type_name(), .ladder = ladder_.str()};
  for (size_t g = 0; g < groups_.size(); ++g)
    out.groups.push_back({.params = names_of(groups_[g]), .hyperparameters = group_hyperparameters(g)});
  for (const auto& [name, s] : state_) {
    // A state whose step is 0 was created by a step the scaler skipped: it is the same as none.
    if (s.at("step").item<int64_t>() == 0) continue;
    for (const auto& [key, t] : s) out.tensors[name + "/" + key] = t.clone();
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& in) {
  const char* type = type_name();
  MT_CHECK(in.optimizer == type, type, ".load_state_dict: the state is from a '", in.optimizer,
           "' optimizer. HINT: load it into the same kind of optimizer that saved it");
  const std::string ladder = in.ladder.empty() ? PrecisionLadder{}.str() : in.ladder;
  MT_CHECK(ladder == ladder_.str(), type, ".load_state_dict: the state was written under ", ladder,
           ", this optimizer runs under ", ladder_.str(),
           ". HINT: resume with the ladder that wrote it (its weights and state are stored for it)");
  MT_CHECK(in.groups.size() == groups_.size(), type, ".load_state_dict: the state has ", in.groups.size(),
           " param groups, this optimizer has ", groups_.size());
  // Which parameter (and its group) each name is, and the state tensors it must have under the new options.
  std::map<std::string, std::pair<const Tensor*, std::vector<std::string>>> expected;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto names = names_of(groups_[g]);
    MT_CHECK(in.groups[g].params == names, type, ".load_state_dict: param group ", g, " has parameters ",
             join(in.groups[g].params), " in the state but ", join(names), " here");
    check_hyperparameters(in.groups[g].hyperparameters);
    auto buffers = ladder_entries(state_buffers(in.groups[g].hyperparameters));
    buffers.push_back("step");
    for (const auto& p : groups_[g]) expected[p.name] = {&p.tensor, buffers};
  }
  std::map<std::string, ParamState> loaded;
  for (const auto& [key, t] : in.tensors) {
    const auto [name, what] = split_state_key(type, key);
    auto it = expected.find(name);
    MT_CHECK(it != expected.end(), type, ".load_state_dict: unexpected entry '", key, "': no parameter '", name,
             "' in this optimizer");
    const auto& [param, buffers] = it->second;
    MT_CHECK(std::find(buffers.begin(), buffers.end(), what) != buffers.end(), type,
             ".load_state_dict: unexpected entry '", key, "'; with these options a parameter has ", join(buffers));
    MT_CHECK(t.defined(), type, ".load_state_dict: entry '", key, "' is an undefined tensor");
    const auto [want_shape, want_dtype] = state_spec(*param, what);
    MT_CHECK(t.shape() == want_shape && t.dtype() == want_dtype, type, ".load_state_dict: entry '", key, "' is ",
             dtype_name(t.dtype()), " ", shape_str(t.shape()), ", expected ", dtype_name(want_dtype), " ",
             shape_str(want_shape));
    Tensor copy = empty(want_shape, {.dtype = want_dtype, .device = param->device()});
    copy_(copy, t);
    loaded[name][what] = copy;
  }
  for (const auto& [name, s] : loaded)
    for (const auto& what : expected.at(name).second)
      MT_CHECK(s.count(what), type, ".load_state_dict: entry '", name, "/", what, "' is missing (the state has ",
               "other entries for '", name, "')");
  for (size_t g = 0; g < groups_.size(); ++g) set_group_hyperparameters(g, in.groups[g].hyperparameters);
  state_ = std::move(loaded);
}

}  // namespace mantissa
