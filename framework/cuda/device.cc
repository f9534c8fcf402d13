// cuda_device_count / cuda_unavailable_reason for every build: the probe (framework/cuda/host/device.cc,
// or framework/cuda/absent/device.cc without CUDA) asked once, and its answer kept.
#include "framework/cuda/device.h"

#include "framework/cuda/probe.h"

namespace mantissa {
namespace {

const gpu::DeviceProbe& cached_probe() {
  static const gpu::DeviceProbe probe = gpu::probe_devices();
  return probe;
}

}  // namespace

int cuda_device_count() { return cached_probe().count; }

std::string cuda_unavailable_reason() { return cached_probe().reason; }

}  // namespace mantissa
