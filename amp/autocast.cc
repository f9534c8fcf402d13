// AutocastGuard, the thread's autocast queries, and the per-thread weight-cast cache with the working
// copies. Compiled into the ops library (the top CMakeLists.txt), which applies it; it includes framework/ only.
#include "amp/autocast.h"

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "framework/autocast_state.h"
#include "framework/autograd.h"

namespace mantissa::amp {
namespace {

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

// Working copies live on their masters (AutogradMeta::working_copy). The mutex guards the slot: the
// optimizer may hand a copy over on another thread than the forward that reads it.
std::mutex g_copies_mu;
std::atomic<size_t> g_copy_count{0};

// The gradient of a working copy goes to its master in fp32, as a cast's would (under create_graph through
// a cast node, which a second backward crosses back to the copy's dtype).
struct WorkingCopyBackward final : Node {
  std::string_view name() const override { return "WorkingCopyBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {g[0].to(DType::kF32)}; }
};

// A handle on the registered copy of `t` with history to `t`, or undefined when there is none.
Tensor working_copy_for(const Tensor& t, DType target) {
  Tensor copy;
  {
    std::lock_guard<std::mutex> lock(g_copies_mu);
    const AutogradMeta* meta = t.impl()->autograd.get();
    if (meta == nullptr || !meta->working_copy || meta->working_copy->dtype() != target) return Tensor();
    copy = *meta->working_copy;
  }
  if (copy.device() != t.device()) return Tensor();  // the master moved (Module::to); the copy did not
  Tensor alias = make_view(copy, copy.shape(), copy.strides(), copy.offset());
  EnableGradGuard grad_on;
  set_history(alias, make_node<WorkingCopyBackward>({&t}));
  return alias;
}

}  // namespace

Tensor cached_cast(const Tensor& t, DType target) {
  if (t.dtype() == target) return t;
  const bool cacheable = autocast_tls().cache_enabled && t.is_leaf() && t.requires_grad() && t.dtype() == DType::kF32 &&
                         is_low_precision(target);
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

AutocastGuard::AutocastGuard(AutocastOptions options) : device_(options.device) {
  AutocastTls& tls = autocast_tls();
  const int d = static_cast<int>(device_);
  // The thread's dtype for the device starts as PyTorch's default for it (framework/autocast_state.h).
  DType dtype = options.dtype.value_or(tls.dtype[d]);
  // A disabled guard may name f32, so that one line serves `autocast(enabled=use_amp)` in every precision
  // of a loop; it keeps the thread's 16-bit dtype for the guards nested in it.
  const bool disabled_f32 = options.state == AutocastState::kDisabled && dtype == DType::kF32;
  if (disabled_f32) dtype = tls.dtype[d];
  MT_CHECK(is_low_precision(dtype), "AutocastGuard: dtype must be f16 or bf16",
           options.state == AutocastState::kDisabled ? " (or f32 with the state kDisabled)" : "", ", got ",
           dtype_name(dtype));
  prev_enabled_ = tls.enabled[d];
  prev_dtype_ = tls.dtype[d];
  prev_cache_ = tls.cache_enabled ? CacheMode::kEnabled : CacheMode::kDisabled;
  prev_policy_device_ = tls.policy_device[d];
  tls.enabled[d] = options.state == AutocastState::kEnabled;
  tls.dtype[d] = dtype;
  tls.cache_enabled = options.cache == CacheMode::kEnabled;
  tls.policy_device[d] = options.policy_device.value_or(prev_policy_device_);
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
  tls.policy_device[d] = prev_policy_device_;
}

namespace {
AutocastOptions replay_options(const AutocastTls& state, DeviceType device) {
  const int d = static_cast<int>(device);
  return {.device = device,
          .dtype = state.dtype[d],
          .state = state.enabled[d] ? AutocastState::kEnabled : AutocastState::kDisabled,
          .cache = state.cache_enabled ? CacheMode::kEnabled : CacheMode::kDisabled,
          .policy_device = state.policy_device[d]};
}
}  // namespace

AutocastReplay::AutocastReplay(const AutocastTls& state)
    : cpu_(replay_options(state, DeviceType::kCPU)), cuda_(replay_options(state, DeviceType::kCUDA)) {}

bool is_castable(const Tensor& t, DeviceType device) {
  return t.defined() && t.device().type == device && is_floating(t.dtype()) && t.dtype() != DType::kF64;
}

bool is_enabled(DeviceType device) { return autocast_tls().enabled[static_cast<int>(device)]; }
DType lower_precision_dtype(DeviceType device) { return autocast_tls().dtype[static_cast<int>(device)]; }
DeviceType policy_device(DeviceType device) { return autocast_tls().policy_device[static_cast<int>(device)]; }

void set_working_copy(const Tensor& master, const Tensor& copy) {
  MT_CHECK(master.defined() && master.is_leaf() && master.requires_grad() && master.dtype() == DType::kF32,
           "set_working_copy: the master must be an fp32 leaf that requires grad");
  MT_CHECK(copy.defined() && is_low_precision(copy.dtype()) && copy.shape() == master.shape() &&
               copy.device() == master.device() && !copy.requires_grad(),
           "set_working_copy: the copy must be an f16/bf16 tensor of the master's shape ", shape_str(master.shape()),
           " on its device, without grad; got ", copy.defined() ? shape_str(copy.shape()) : "undefined");
  std::lock_guard<std::mutex> lock(g_copies_mu);
  std::shared_ptr<Tensor>& slot = master.impl()->meta().working_copy;
  if (!slot) ++g_copy_count;
  slot = std::make_shared<Tensor>(copy);
}

void clear_working_copy(const Tensor& master) {
  std::lock_guard<std::mutex> lock(g_copies_mu);
  AutogradMeta* meta = master.impl()->autograd.get();
  if (meta == nullptr || !meta->working_copy) return;
  meta->working_copy.reset();
  --g_copy_count;
}

size_t working_copy_count() { return g_copy_count.load(); }

Tensor make_working_copy(const Tensor& master, DType dtype) {
  MT_CHECK(is_low_precision(dtype), "make_working_copy: dtype must be f16 or bf16, got ", dtype_name(dtype));
  Tensor copy = empty(master.shape(), {.dtype = dtype, .device = master.device()});
  copy_(copy, master);
  set_working_copy(master, copy);
  return copy;
}

ScopedWorkingCopies::ScopedWorkingCopies(const std::vector<Tensor>& params, DType dtype) {
  MT_CHECK(is_low_precision(dtype), "ScopedWorkingCopies: dtype must be f16 or bf16, got ", dtype_name(dtype));
  for (const Tensor& p : params) {
    if (p.dtype() != DType::kF32) continue;  // f64 masters are never autocast
    copies_.emplace_back(p, make_working_copy(p, dtype));
  }
}

ScopedWorkingCopies::~ScopedWorkingCopies() {
  for (const auto& [master, copy] : copies_) clear_working_copy(master);
}

void ScopedWorkingCopies::refresh() {
  NoGradGuard no_grad;
  for (const auto& [master, copy] : copies_) copy_(copy, master);
}

size_t cache_size() { return t_cache.size(); }
uint64_t weight_cast_count() { return t_weight_casts; }

}  // namespace mantissa::amp
