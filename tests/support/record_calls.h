// record_calls: forward pre-hooks and forward hooks on every module of a model that append "pre <path>" and
// "fwd <path>" to `events`, in call order (the module-hook and module-call tests' witness).
#pragma once

#include <string>
#include <vector>

#include "framework/module.h"

namespace mantissa::testing {

inline std::vector<HookHandle> record_calls(Module& model, std::vector<std::string>& events) {
  std::vector<HookHandle> handles;
  for (const auto& [path, m] : model.named_modules()) {
    handles.push_back(m->register_forward_pre_hook(
        [&events, p = path](Module&, const std::vector<Tensor>&) { events.push_back("pre " + p); }));
    handles.push_back(
        m->register_forward_hook([&events, p = path](Module&, const std::vector<Tensor>&, const std::vector<Tensor>&) {
          events.push_back("fwd " + p);
        }));
  }
  return handles;
}

}  // namespace mantissa::testing
