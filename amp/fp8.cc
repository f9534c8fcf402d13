// Fp8Context (which linears run in FP8 and their state), its linear() override and Fp8Guard (amp/fp8.h).
#include "amp/fp8.h"

#include <map>
#include <set>
#include <utility>

#include "framework/error.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"

namespace mantissa::amp {
namespace {

constexpr int64_t kFp8Multiple = 16;  // cuBLASLt's FP8 GEMM wants every dim a multiple of 16
constexpr const char* kStepKey = "step";

bool matches(const std::string& name, const std::string& pattern) {
  return name == pattern ||
         (name.size() > pattern.size() && name.compare(0, pattern.size(), pattern) == 0 && name[pattern.size()] == '.');
}

std::string state_key(const std::string& param, Fp8Role role, const char* field) {
  return detail::cat(param, "/", fp8_role_name(role), "/", field);
}

// What quantize_fp8 takes.
bool castable(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// The Linear modules of the tree (each once), depth first with an explicit stack.
std::vector<const Module*> linear_modules(const Module& root) {
  std::vector<const Module*> found, stack{&root};
  std::set<const Module*> seen{&root};
  while (!stack.empty()) {
    const Module* m = stack.back();
    stack.pop_back();
    if (m->type_name() == "Linear") found.push_back(m);
    const auto& children = m->named_children();
    for (auto it = children.rbegin(); it != children.rend(); ++it)
      if (seen.insert(it->second.get()).second) stack.push_back(it->second.get());
  }
  return found;
}

}  // namespace

// The LinearOverride that Fp8Guard installs: FP8 for a managed weight, the ordinary path for anything else.
class Fp8Context::Override final : public LinearOverride {
 public:
  explicit Override(Fp8Context& context) : context_(context) {}
  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) override {
    const auto it = context_.by_weight_.find(weight.impl());
    if (it == context_.by_weight_.end()) return Tensor();
    // What fp8_linear cannot take goes the ordinary way, which reports a malformed call as linear() always has.
    if (!castable(x.dtype()) || x.dim() < 1 || x.size(-1) != weight.size(1) ||
        (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0))))
      return Tensor();
    return fp8_linear(x, weight, bias, context_.states_[it->second]);
  }

 private:
  Fp8Context& context_;
};

Fp8Context::Fp8Context(const Module& model, Fp8Recipe recipe, Fp8Options options)
    : recipe_(std::move(recipe)), accumulator_(options.accumulator), override_(std::make_unique<Override>(*this)) {
  check_fp8_recipe(recipe_);
  const std::vector<NamedTensor> params = model.named_parameters();
  for (const std::string& pattern : options.exclude) {
    bool found = false;
    for (const NamedTensor& p : params) found = found || matches(p.name, pattern);
    MT_CHECK(found, "Fp8Context: exclude entry '", pattern,
             "' names no parameter of the model. HINT: give a parameter name (\"head.weight\") or a module prefix "
             "(\"head\", \"blocks.0\") as Module::named_parameters() spells them");
  }
  std::set<const TensorImpl*> linear_weights;
  for (const Module* m : linear_modules(model))
    for (const NamedTensor& p : m->named_parameters())
      if (p.name == "weight") linear_weights.insert(p.tensor.impl());
  for (const NamedTensor& p : params) {
    if (!linear_weights.contains(p.tensor.impl()) || p.tensor.dim() != 2 || !castable(p.tensor.dtype())) continue;
    if (p.tensor.size(0) % kFp8Multiple != 0 || p.tensor.size(1) % kFp8Multiple != 0) continue;
    bool excluded = false;
    for (const std::string& pattern : options.exclude) excluded = excluded || matches(p.name, pattern);
    if (excluded) continue;
    by_weight_[p.tensor.impl()] = managed_.size();
    managed_.push_back(p.name);
    weights_.push_back(p.tensor);
    // A key per linear: the seed and the linear's index mixed (splitmix64's finalizer).
    uint64_t key = options.seed + 0x9e3779b97f4a7c15ull * (managed_.size());
    key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
    key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
    states_.push_back(Fp8LinearState::make(p.name, recipe_, p.tensor.device(), key ^ (key >> 31)));
  }
}

Fp8Context::~Fp8Context() {
  // A guard that outlives its context (on this thread) must not leave a dangling override installed: linear()
  // takes the ordinary path until the guard goes and restores what was there before it.
  if (linear_override() == override_.get()) set_linear_override(nullptr);
}

bool Fp8Context::manages(const Tensor& weight) const { return by_weight_.contains(weight.impl()); }

const Fp8LinearState& Fp8Context::state(const std::string& name) const {
  for (size_t i = 0; i < managed_.size(); ++i)
    if (managed_[i] == name) return *states_[i];
  MT_THROW("Fp8Context: '", name, "' is not a managed FP8 linear weight");
}

void Fp8Context::step() {
  for (const auto& s : states_)
    for (Fp8TensorState& r : s->roles) fp8_end_step(r);
  ++steps_;
}

Tensor Fp8Context::overflow_total() const {
  if (states_.empty()) return zeros({}, {.dtype = DType::kI64});
  std::vector<Tensor> counts;
  for (const auto& s : states_)
    for (const Fp8TensorState& r : s->roles) counts.push_back(r.overflow_count.to(states_.front()->roles[0].device()));
  return sum(stack(counts)).to(DType::kI64);
}

std::vector<NamedTensor> Fp8Context::state_dict() const {
  std::vector<NamedTensor> out;
  for (const auto& s : states_)
    for (Fp8Role role : kFp8Roles) {
      const Fp8TensorState& r = s->role(role);
      out.push_back({state_key(s->name, role, "amax_history"), fp8_history_newest_first(r)});
      out.push_back({state_key(s->name, role, "scale"), r.scale.clone()});
      out.push_back({state_key(s->name, role, "overflow"), r.overflow_count.clone()});
      out.push_back({state_key(s->name, role, "underflow"), r.underflow_count.clone()});
    }
  for (const auto& s : states_)
    if (rounds()) {
      out.push_back({detail::cat(s->name, "/rounding"),
                     from_vector(std::vector<int64_t>{static_cast<int64_t>(s->rounding_seed), s->rounding_calls})});
    }
  out.push_back({kStepKey, scalar_tensor(static_cast<double>(steps_), {.dtype = DType::kI64})});
  return out;
}

void Fp8Context::load_state_dict(const std::vector<NamedTensor>& state) {
  std::map<std::string, Tensor> given;
  for (const NamedTensor& t : state) {
    MT_CHECK(given.emplace(t.name, t.tensor).second, "Fp8Context.load_state_dict: '", t.name, "' appears twice");
  }
  // Every check first: a state that does not fit loads nothing.
  std::vector<std::string> missing;
  auto expect = [&](const std::string& key) -> const Tensor* {
    const auto it = given.find(key);
    if (it == given.end()) {
      missing.push_back(key);
      return nullptr;
    }
    return &it->second;
  };
  const Tensor* step = expect(kStepKey);
  if (step != nullptr) {
    MT_CHECK(step->numel() == 1 && (step->dtype() == DType::kI64 || step->dtype() == DType::kI32),
             "Fp8Context.load_state_dict: '", kStepKey, "' must be one integer, got ", dtype_name(step->dtype()), " ",
             shape_str(step->shape()));
    MT_CHECK(step->item() >= 0, "Fp8Context.load_state_dict: '", kStepKey, "' is negative (", step->item(), ")");
  }
  for (const auto& s : states_)
    for (Fp8Role role : kFp8Roles) {
      const Fp8TensorState& r = s->role(role);
      const std::string hkey = state_key(s->name, role, "amax_history"), skey = state_key(s->name, role, "scale");
      if (const Tensor* h = expect(hkey)) {
        MT_CHECK(h->dim() == 1 && is_floating(h->dtype()), "Fp8Context.load_state_dict: '", hkey,
                 "' must be a 1-D floating tensor, got ", dtype_name(h->dtype()), " ", shape_str(h->shape()));
        MT_CHECK(h->size(0) == r.history_len(), "Fp8Context.load_state_dict: '", hkey, "' holds ", h->size(0),
                 " amaxes, but this recipe keeps ", r.history_len(), " for ", fp8_role_name(role), " (", recipe_.str(),
                 "). HINT: resume with the recipe the checkpoint was written with");
      }
      if (const Tensor* sc = expect(skey)) {
        MT_CHECK(sc->numel() == 1 && is_floating(sc->dtype()), "Fp8Context.load_state_dict: '", skey,
                 "' must be one floating value, got ", dtype_name(sc->dtype()), " ", shape_str(sc->shape()));
      }
      const std::string okey = state_key(s->name, role, "overflow");
      if (const Tensor* o = expect(okey)) {
        MT_CHECK(o->numel() == 1 && (is_floating(o->dtype()) || o->dtype() == DType::kI64),
                 "Fp8Context.load_state_dict: '", okey, "' must be one count, got ", dtype_name(o->dtype()), " ",
                 shape_str(o->shape()));
        MT_CHECK(o->item() >= 0, "Fp8Context.load_state_dict: '", okey, "' is negative (", o->item(), ")");
      }
      // Per-tensor recipes' checkpoints written before underflows were counted have none: 0 then.
      const std::string ukey = state_key(s->name, role, "underflow");
      if (recipe_.block_scaled() || given.contains(ukey)) {
        if (const Tensor* u = expect(ukey)) {
          MT_CHECK(u->numel() == 1 && (is_floating(u->dtype()) || u->dtype() == DType::kI64) && u->item() >= 0,
                   "Fp8Context.load_state_dict: '", ukey, "' must be one count >= 0, got ", dtype_name(u->dtype()), " ",
                   shape_str(u->shape()));
        }
      }
    }
  for (const auto& s : states_) {
    if (!rounds()) break;
    const std::string rkey = detail::cat(s->name, "/rounding");
    if (const Tensor* t = expect(rkey)) {
      MT_CHECK(t->dim() == 1 && t->size(0) == 2 && t->dtype() == DType::kI64, "Fp8Context.load_state_dict: '", rkey,
               "' must be [2] i64 (the rounding key and the casts rounded), got ", dtype_name(t->dtype()), " ",
               shape_str(t->shape()));
      MT_CHECK(t->to(kCPU).data<int64_t>()[1] >= 0, "Fp8Context.load_state_dict: '", rkey,
               "' counts a negative number of casts");
    }
  }
  std::vector<std::string> unexpected;
  std::set<std::string> known{kStepKey};
  for (const auto& s : states_)
    for (Fp8Role role : kFp8Roles) {
      known.insert(state_key(s->name, role, "amax_history"));
      known.insert(state_key(s->name, role, "scale"));
      known.insert(state_key(s->name, role, "overflow"));
      known.insert(state_key(s->name, role, "underflow"));
    }
  if (rounds())
    for (const auto& s : states_) known.insert(detail::cat(s->name, "/rounding"));
  for (const auto& [name, t] : given)
    if (!known.contains(name)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty()) {
    auto list = [](const std::vector<std::string>& names) {
      std::string out;
      for (size_t i = 0; i < names.size() && i < 4; ++i) out += (i ? ", '" : "'") + names[i] + "'";
      if (names.size() > 4) out += detail::cat(" and ", names.size() - 4, " more");
      return out.empty() ? std::string("none") : out;
    };
    MT_THROW("Fp8Context.load_state_dict: the state does not match this model's FP8 linears: missing ", list(missing),
             "; unexpected ", list(unexpected),
             ". HINT: the checkpoint was written for other FP8 linears (another model, Fp8Options::exclude, or a "
             "layer whose features are not multiples of 16)");
  }
  // Load: the slot follows from the step count, then the history is laid around it.
  steps_ = static_cast<int64_t>(step->item());
  for (const auto& s : states_)
    for (Fp8Role role : kFp8Roles) {
      Fp8TensorState& r = s->role(role);
      r.slot = steps_ % r.history_len();
      fp8_set_history_newest_first(r, given.at(state_key(s->name, role, "amax_history")));
      r.scale = given.at(state_key(s->name, role, "scale")).to(DType::kF32).reshape({}).to(r.device()).clone();
      r.scale_inv = fp8_reciprocal(r.scale);
      r.overflow_count =
          given.at(state_key(s->name, role, "overflow")).to(DType::kF64).reshape({}).to(r.device()).clone();
      const auto u = given.find(state_key(s->name, role, "underflow"));
      r.underflow_count = u != given.end() ? u->second.to(DType::kF64).reshape({}).to(r.device()).clone()
                                           : zeros({}, {.dtype = DType::kF64, .device = r.device()});
    }
  if (rounds()) {
    for (const auto& s : states_) {
      const Tensor t = given.at(detail::cat(s->name, "/rounding")).to(kCPU).contiguous();
      s->rounding_seed = static_cast<uint64_t>(t.data<int64_t>()[0]);
      s->rounding_calls = t.data<int64_t>()[1];
    }
  }
}

std::vector<Fp8Context::TensorStats> Fp8Context::stats() const {
  std::vector<TensorStats> out;
  for (const auto& s : states_)
    for (Fp8Role role : kFp8Roles) {
      const Fp8TensorState& r = s->role(role);
      out.push_back({.name = s->name,
                     .role = fp8_role_name(role),
                     .scale = r.scale.item(),
                     .amax = r.amax.item(),
                     .overflow = static_cast<int64_t>(r.overflow_count.item()),
                     .dtype = r.dtype,
                     .underflow = static_cast<int64_t>(r.underflow_count.item())});
    }
  return out;
}

void Fp8Context::to(Device device) {
  for (const auto& s : states_)
    for (Fp8TensorState& r : s->roles) r.to(device);
}

Fp8Guard::Fp8Guard(Fp8Context& context)
    : previous_(set_linear_override(context.override_.get())), accumulator_(context.accumulator_) {}

Fp8Guard::~Fp8Guard() { set_linear_override(previous_); }

}  // namespace mantissa::amp
