// AutocastGuard, the cast policy table and the per-thread weight-cast cache.
#include "amp/autocast.h"

#include <mutex>
#include <unordered_map>

#include "framework/autocast_state.h"
#include "framework/autograd.h"

namespace mantissa::amp {
namespace {

// The policy table: every op that autocast touches, by category (DESIGN.md, "Autocast"). Ops not
// listed run in their inputs' dtypes by ordinary type promotion.
const std::vector<PolicyEntry> kTable = {
    // Lower precision: the tensor-core ops.
    {"matmul", CastPolicy::kLowerPrecision}, {"mm", CastPolicy::kLowerPrecision},
    {"bmm", CastPolicy::kLowerPrecision}, {"linear", CastPolicy::kLowerPrecision},
    {"addmm", CastPolicy::kLowerPrecision}, {"baddbmm", CastPolicy::kLowerPrecision},
    {"conv1d", CastPolicy::kLowerPrecision}, {"conv2d", CastPolicy::kLowerPrecision},
    {"scaled_dot_product_attention", CastPolicy::kLowerPrecision},
    // fp32: range- or precision-sensitive ops.
    {"exp", CastPolicy::kFp32}, {"log", CastPolicy::kFp32}, {"pow", CastPolicy::kFp32},
    {"softmax", CastPolicy::kFp32}, {"log_softmax", CastPolicy::kFp32}, {"layer_norm", CastPolicy::kFp32},
    {"group_norm", CastPolicy::kFp32}, {"sum", CastPolicy::kFp32}, {"cumsum", CastPolicy::kFp32},
    {"prod", CastPolicy::kFp32}, {"norm", CastPolicy::kFp32}, {"logsumexp", CastPolicy::kFp32},
    {"cross_entropy", CastPolicy::kFp32}, {"nll_loss", CastPolicy::kFp32}, {"mse_loss", CastPolicy::kFp32},
    {"l1_loss", CastPolicy::kFp32}, {"smooth_l1_loss", CastPolicy::kFp32},
    {"binary_cross_entropy_with_logits", CastPolicy::kFp32},
    // Promote to the widest input.
    {"addcmul", CastPolicy::kPromote}, {"addcdiv", CastPolicy::kPromote}, {"dot", CastPolicy::kPromote},
    {"cat", CastPolicy::kPromote}, {"stack", CastPolicy::kPromote}, {"index_put", CastPolicy::kPromote},
    {"scatter_add", CastPolicy::kPromote},
    // Refused: not safe to autocast.
    {"binary_cross_entropy", CastPolicy::kRefused},
};

// Cached casts of fp32 leaves that require grad, keyed by the source tensor and the target dtype (nested
// f16 and bf16 guards each keep their copy). A cast's graph references its source, so the source lives
// as long as its entry; the weak reference is a second guard against a reused address.
struct CacheKey {
  const TensorImpl* source;
  DType dtype;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return std::hash<const TensorImpl*>()(k.source) ^ static_cast<size_t>(k.dtype);
  }
};
struct CacheEntry {
  std::weak_ptr<TensorImpl> source;
  Tensor cast;
};
thread_local std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> t_cache;
thread_local uint64_t t_weight_casts = 0;

bool eligible(const Tensor& t, DeviceType device) {
  return t.defined() && t.device().type == device && is_floating(t.dtype()) && t.dtype() != DType::kF64;
}

// Registered working copies, by master and dtype. Shared by all threads (the optimizer may run on
// another thread than the forward); the weak reference drops an entry whose master died.
struct WorkingCopy {
  std::weak_ptr<TensorImpl> master;
  Tensor copy;
};
std::mutex g_copies_mu;
std::unordered_map<CacheKey, WorkingCopy, CacheKeyHash> g_copies;

// The gradient of a working copy goes to its master in fp32, as a cast's would.
struct WorkingCopyBackward final : Node {
  std::string_view name() const override { return "WorkingCopyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0].to(DType::kF32)}; }
};

// A handle on the registered copy of `t` with history to `t`, or undefined when there is none.
Tensor working_copy_for(const Tensor& t, DType target) {
  Tensor copy;
  {
    std::lock_guard<std::mutex> lock(g_copies_mu);
    auto it = g_copies.find(CacheKey{t.impl(), target});
    if (it == g_copies.end() || it->second.master.expired()) return Tensor();
    copy = it->second.copy;
  }
  if (copy.device() != t.device()) return Tensor();  // the master moved (Module::to); the copy did not
  Tensor alias = make_view(copy, copy.shape(), copy.strides(), copy.offset());
  EnableGradGuard grad_on;
  set_history(alias, make_node<WorkingCopyBackward>({&t}));
  return alias;
}

Tensor cast_to(const Tensor& t, DType target) {
  if (t.dtype() == target) return t;
  const bool cacheable = autocast_tls().cache_enabled && t.is_leaf() && t.requires_grad() &&
                         t.dtype() == DType::kF32 && is_low_precision(target);
  if (!cacheable) return t.to(target);
  const CacheKey key{t.impl(), target};
  auto it = t_cache.find(key);
  if (it != t_cache.end() && !it->second.source.expired()) return it->second.cast;
  // A registered working copy replaces the cast (no conversion, no new memory).
  Tensor cast = working_copy_for(t, target);
  if (!cast.defined()) {
    // Record the cast with grad on, so a no-grad forward cannot leave a history-less copy in the cache
    // that a later grad-enabled forward would then use.
    EnableGradGuard grad_on;
    cast = t.to(target);
    ++t_weight_casts;
  }
  t_cache[key] = CacheEntry{t.impl_ptr(), cast};
  return cast;
}

}  // namespace

AutocastGuard::AutocastGuard(AutocastOptions options) : device_(options.device) {
  MT_CHECK(is_low_precision(options.dtype), "AutocastGuard: dtype must be f16 or bf16, got ",
           dtype_name(options.dtype));
  AutocastTls& tls = autocast_tls();
  const int d = static_cast<int>(device_);
  prev_enabled_ = tls.enabled[d];
  prev_dtype_ = tls.dtype[d];
  prev_cache_ = tls.cache_enabled ? CacheMode::kEnabled : CacheMode::kDisabled;
  tls.enabled[d] = options.state == AutocastState::kEnabled;
  tls.dtype[d] = options.dtype;
  tls.cache_enabled = options.cache == CacheMode::kEnabled;
  counted_ = tls.enabled[d];
  if (counted_) ++tls.enabling_depth;
}

AutocastGuard::~AutocastGuard() {
  AutocastTls& tls = autocast_tls();
  const int d = static_cast<int>(device_);
  // The region ends when the last enabling guard goes: its casts (and the graphs they hold) are freed.
  if (counted_ && --tls.enabling_depth == 0) t_cache.clear();
  tls.enabled[d] = prev_enabled_;
  tls.dtype[d] = prev_dtype_;
  tls.cache_enabled = prev_cache_ == CacheMode::kEnabled;
}

bool is_enabled(DeviceType device) { return autocast_tls().enabled[static_cast<int>(device)]; }
DType lower_precision_dtype(DeviceType device) { return autocast_tls().dtype[static_cast<int>(device)]; }

CastPolicy policy_for(std::string_view op) {
  for (const PolicyEntry& e : kTable) {
    if (e.op == op) return e.policy;
  }
  return CastPolicy::kNone;
}

const std::vector<PolicyEntry>& policy_table() { return kTable; }

std::string_view policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::kLowerPrecision: return "lower precision";
    case CastPolicy::kFp32: return "fp32";
    case CastPolicy::kPromote: return "promote";
    case CastPolicy::kRefused: return "refused";
    case CastPolicy::kNone: return "none";
  }
  return "?";
}

std::vector<Tensor> cast_inputs(std::string_view op, std::vector<Tensor> inputs) {
  std::vector<Tensor> out = std::move(inputs);
  const AutocastTls& tls = autocast_tls();
  // The device of the first defined input decides which autocast state applies.
  DeviceType device = DeviceType::kCPU;
  bool found = false;
  for (const Tensor& t : out) {
    if (t.defined()) {
      device = t.device().type;
      found = true;
      break;
    }
  }
  if (!found || !tls.enabled[static_cast<int>(device)]) return out;
  const CastPolicy policy = policy_for(op);
  switch (policy) {
    case CastPolicy::kNone:
      return out;
    case CastPolicy::kRefused:
      MT_THROW(op, ": unsafe to autocast: its gradient and loss lose accuracy in ",
               dtype_name(tls.dtype[static_cast<int>(device)]),
               ". HINT: use binary_cross_entropy_with_logits, which fuses the sigmoid and is safe to autocast, "
               "or run this op outside the AutocastGuard on f32 inputs");
    case CastPolicy::kLowerPrecision:
    case CastPolicy::kFp32: {
      const DType target = policy == CastPolicy::kFp32 ? DType::kF32 : tls.dtype[static_cast<int>(device)];
      for (Tensor& t : out) {
        if (eligible(t, device)) t = cast_to(t, target);
      }
      return out;
    }
    case CastPolicy::kPromote: {
      bool any = false;
      DType widest = DType::kF16;
      for (const Tensor& t : out) {
        if (!eligible(t, device)) continue;
        widest = any ? promote_types(widest, t.dtype()) : t.dtype();
        any = true;
      }
      for (Tensor& t : out) {
        if (eligible(t, device)) t = cast_to(t, widest);
      }
      return out;
    }
  }
  return out;
}

Tensor cast_input(std::string_view op, const Tensor& input) { return cast_inputs(op, {input})[0]; }

void set_working_copy(const Tensor& master, const Tensor& copy) {
  MT_CHECK(master.defined() && master.is_leaf() && master.requires_grad() && master.dtype() == DType::kF32,
           "set_working_copy: the master must be an fp32 leaf that requires grad");
  MT_CHECK(copy.defined() && is_low_precision(copy.dtype()) && copy.shape() == master.shape() &&
               copy.device() == master.device() && !copy.requires_grad(),
           "set_working_copy: the copy must be an f16/bf16 tensor of the master's shape ", shape_str(master.shape()),
           " on its device, without grad; got ", copy.defined() ? shape_str(copy.shape()) : "undefined");
  std::lock_guard<std::mutex> lock(g_copies_mu);
  g_copies[CacheKey{master.impl(), copy.dtype()}] = WorkingCopy{master.impl_ptr(), copy};
}

void clear_working_copy(const Tensor& master) {
  std::lock_guard<std::mutex> lock(g_copies_mu);
  for (DType d : {DType::kF16, DType::kBF16}) g_copies.erase(CacheKey{master.impl(), d});
}

size_t working_copy_count() {
  std::lock_guard<std::mutex> lock(g_copies_mu);
  return g_copies.size();
}

size_t cache_size() { return t_cache.size(); }
uint64_t weight_cast_count() { return t_weight_casts; }

}  // namespace mantissa::amp
