// The per-thread autocast switches, kept in the framework layer so the autograd engine can suspend
// autocast while it runs backward formulas (they compute in the dtypes the forward chose). The guard and
// the cast cache live in amp/autocast.h, the casts by op category in ops/autocast.h.
#pragma once

#include <array>

#include "framework/device.h"
#include "framework/dtype.h"

namespace mantissa {

struct AutocastTls {
  std::array<bool, 2> enabled{false, false};  // indexed by DeviceType
  std::array<DType, 2> dtype{DType::kBF16, DType::kF16};
  // Whose categories apply to each device type's tensors (amp::AutocastOptions::policy_device).
  std::array<DeviceType, 2> policy_device{DeviceType::kCPU, DeviceType::kCUDA};
  bool cache_enabled = true;
  int enabling_depth = 0;  // live guards that enable autocast; the cache clears when it drops to 0
};

AutocastTls& autocast_tls();

// Turns autocast off for every device on this thread for a scope, restoring it after.
class AutocastSuspend {
 public:
  AutocastSuspend() : saved_(autocast_tls().enabled) { autocast_tls().enabled = {false, false}; }
  ~AutocastSuspend() { autocast_tls().enabled = saved_; }
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  std::array<bool, 2> saved_;
};

}  // namespace mantissa
