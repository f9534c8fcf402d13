// The precision ladder's names, its saved form, its checks and its byte counts (optim/precision_ladder.h).
#include "optim/precision_ladder.h"

#include <charconv>
#include <vector>

#include "framework/error.h"
#include "optim/low_precision.h"

namespace mantissa {

const char* master_weights_name(MasterWeights m) { return m == MasterWeights::kFp32 ? "fp32" : "none"; }

const char* update_rounding_name(UpdateRounding r) {
  switch (r) {
    case UpdateRounding::kNearest: return "nearest";
    case UpdateRounding::kStochastic: return "stochastic";
    case UpdateRounding::kKahan: return "kahan";
  }
  return "?";
}

const char* state_storage_name(StateStorage s) {
  switch (s) {
    case StateStorage::kFp32: return "fp32";
    case StateStorage::kBf16: return "bf16";
    case StateStorage::k8bit: return "8bit";
  }
  return "?";
}

std::string PrecisionLadder::str() const {
  std::string out = std::string("master_weights=") + master_weights_name(master_weights);
  if (master_weights == MasterWeights::kNone)
    out += std::string(" update_rounding=") + update_rounding_name(update_rounding);
  out += std::string(" optimizer_state=") + state_storage_name(optimizer_state);
  if (master_weights == MasterWeights::kNone && update_rounding == UpdateRounding::kStochastic)
    out += " seed=" + std::to_string(seed);
  return out;
}

void PrecisionLadder::validate(const char* who) const {
  MT_CHECK(master_weights == MasterWeights::kNone || update_rounding == UpdateRounding::kNearest, who,
           ": update_rounding=", update_rounding_name(update_rounding),
           " rounds updates into bf16 weights, but master_weights=fp32 keeps fp32 masters that take the update "
           "exactly. HINT: master_weights=none, or leave update_rounding=nearest");
}

BytesPerParameter PrecisionLadder::bytes_per_parameter(int moments, bool working_copy) const {
  BytesPerParameter b;
  const bool masters = master_weights == MasterWeights::kFp32;
  b.weights = masters ? 4 : 2;
  b.grads = masters ? 4 : 2;  // a grad has its parameter's dtype
  b.working_copy = masters && working_copy ? 2 : 0;
  b.compensation = !masters && update_rounding == UpdateRounding::kKahan ? 2 : 0;
  const double per_moment = optimizer_state == StateStorage::kFp32   ? 4.0
                            : optimizer_state == StateStorage::kBf16 ? 2.0
                                                                     : 1.0 + 4.0 / double(low_precision::kQuantBlock);
  b.state = per_moment * moments;
  return b;
}

std::optional<PrecisionLadder> parse_precision_ladder(std::string_view s) {
  PrecisionLadder l;
  std::vector<std::string_view> parts;
  while (!s.empty()) {
    const size_t sp = s.find(' ');
    parts.push_back(s.substr(0, sp));
    s = sp == std::string_view::npos ? std::string_view() : s.substr(sp + 1);
  }
  if (parts.size() < 2) return std::nullopt;
  for (std::string_view part : parts) {
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "master_weights") {
      if (value == "fp32")
        l.master_weights = MasterWeights::kFp32;
      else if (value == "none")
        l.master_weights = MasterWeights::kNone;
      else
        return std::nullopt;
    } else if (key == "update_rounding") {
      if (value == "nearest")
        l.update_rounding = UpdateRounding::kNearest;
      else if (value == "stochastic")
        l.update_rounding = UpdateRounding::kStochastic;
      else if (value == "kahan")
        l.update_rounding = UpdateRounding::kKahan;
      else
        return std::nullopt;
    } else if (key == "optimizer_state") {
      if (value == "fp32")
        l.optimizer_state = StateStorage::kFp32;
      else if (value == "bf16")
        l.optimizer_state = StateStorage::kBf16;
      else if (value == "8bit")
        l.optimizer_state = StateStorage::k8bit;
      else
        return std::nullopt;
    } else if (key == "seed") {
      const auto r = std::from_chars(value.data(), value.data() + value.size(), l.seed);
      if (r.ec != std::errc() || r.ptr != value.data() + value.size()) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  // str() is canonical: anything it would not write is not a ladder it wrote.
  if (l.str() != [&] {
        std::string joined;
        for (std::string_view p : parts) joined += (joined.empty() ? "" : " ") + std::string(p);
        return joined;
      }())
    return std::nullopt;
  return l;
}

uint32_t ladder_stream(std::string_view param_name) {
  uint32_t h = 2166136261u;
  for (const char c : param_name) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

}  // namespace mantissa
