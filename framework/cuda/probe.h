// The device probe behind cuda_device_count() (framework/cuda/device.h), defined once per build:
// framework/cuda/host/device.cc asks the CUDA runtime, framework/cuda/absent/device.cc answers for a build
// without CUDA. device.cc asks it once and keeps the answer.
#pragma once

#include <string>

namespace mantissa::gpu {

struct DeviceProbe {
  int count = 0;
  std::string reason;  // why count is 0; empty when it is not
};
DeviceProbe probe_devices();

}  // namespace mantissa::gpu
