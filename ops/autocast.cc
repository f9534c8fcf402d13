// The casts by descriptor policy (cast_inputs), the policy views, and the ops registered from outside the
// library. The guard and the weight-cast cache are amp/autocast.cc.
#include "ops/autocast.h"

#include <mutex>

#include "framework/error.h"

namespace mantissa::amp {
namespace {

// Ops defined outside the library (register_op). Registration may happen on any thread, at start-up or
// later, so every read takes the lock.
std::mutex g_registered_mu;
std::vector<const OpInfo*> g_registered;

// The descriptor named `op`: a built-in's or a registered op's; null when there is none.
const OpInfo* find_op(std::string_view op) {
  for (const OpInfo* info : all_ops()) {
    if (info->name == op) return info;
  }
  std::lock_guard<std::mutex> lock(g_registered_mu);
  for (const OpInfo* info : g_registered) {
    if (info->name == op) return info;
  }
  return nullptr;
}

}  // namespace

bool register_op(const OpInfo& op) {
  MT_CHECK(!op.name.empty(), "amp::register_op: the op has no name");
  for (const OpInfo* info : all_ops()) {
    MT_CHECK(info->name != op.name, "amp::register_op: '", op.name,
             "' is the name of a built-in op, whose categories are its own. HINT: give your op a name of its "
             "own");
  }
  std::lock_guard<std::mutex> lock(g_registered_mu);
  for (const OpInfo* info : g_registered) {
    if (info == &op) return true;  // registered already
    MT_CHECK(info->name != op.name, "amp::register_op: an op named '", op.name,
             "' is registered already, with another descriptor. HINT: register each op once, or rename one");
  }
  g_registered.push_back(&op);
  return true;
}

std::vector<const OpInfo*> registered_ops() {
  std::lock_guard<std::mutex> lock(g_registered_mu);
  return g_registered;
}

CastPolicy policy_for(std::string_view op, DeviceType device) {
  const OpInfo* info = find_op(op);
  return info != nullptr ? info->autocast.on(device) : CastPolicy::kNone;
}

std::vector<PolicyEntry> policy_table() {
  std::vector<PolicyEntry> table;
  const auto add = [&](const OpInfo* info) {
    if (info->autocast.cpu != CastPolicy::kNone || info->autocast.cuda != CastPolicy::kNone) {
      table.push_back({info->name, info->autocast});
    }
  };
  for (const OpInfo* info : all_ops()) add(info);
  for (const OpInfo* info : registered_ops()) add(info);
  return table;
}

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

std::vector<Tensor> cast_inputs(const OpInfo& info, std::vector<Tensor> inputs) {
  const std::string_view op = info.name;
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
  const DeviceType lists = tls.policy_device[static_cast<int>(device)];
  const CastPolicy policy = info.autocast.on(lists);
  switch (policy) {
    case CastPolicy::kNone: return out;
    case CastPolicy::kRefused:
      MT_THROW(op, ": unsafe to autocast on ", lists == DeviceType::kCUDA ? "CUDA" : "the CPU",
               ": its gradient and loss lose accuracy in ", dtype_name(tls.dtype[static_cast<int>(device)]),
               ". HINT: use binary_cross_entropy_with_logits, which fuses the sigmoid and is safe to autocast, "
               "or run this op outside the AutocastGuard on f32 inputs");
    case CastPolicy::kLowerPrecision:
    case CastPolicy::kFp32: {
      const DType target = policy == CastPolicy::kFp32 ? DType::kF32 : tls.dtype[static_cast<int>(device)];
      for (Tensor& t : out) {
        if (is_castable(t, device)) t = cached_cast(t, target);
      }
      return out;
    }
    case CastPolicy::kPromote: {
      bool any = false;
      DType widest = DType::kF16;
      for (const Tensor& t : out) {
        if (!is_castable(t, device)) continue;
        widest = any ? promote_types(widest, t.dtype()) : t.dtype();
        any = true;
      }
      for (Tensor& t : out) {
        if (is_castable(t, device)) t = cached_cast(t, widest);
      }
      return out;
    }
  }
  return out;
}

Tensor cast_input(const OpInfo& op, const Tensor& input) { return cast_inputs(op, {input})[0]; }

std::vector<Tensor> cast_inputs(std::string_view op, std::vector<Tensor> inputs) {
  const OpInfo* info = find_op(op);
  if (info != nullptr) return cast_inputs(*info, std::move(inputs));
  return cast_inputs(OpInfo{op, {}}, std::move(inputs));  // no descriptor: kNone on every device
}

Tensor cast_input(std::string_view op, const Tensor& input) { return cast_inputs(op, {input})[0]; }

}  // namespace mantissa::amp
