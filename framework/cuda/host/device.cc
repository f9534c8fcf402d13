// The CUDA build's device probe and cuda_synchronize (the CPU build's are framework/cuda/absent/device.cc).
#include "framework/cuda/device.h"

#include <cuda_runtime_api.h>

#include "framework/cuda/probe.h"
#include "framework/cuda/stream.h"

namespace mantissa {

namespace gpu {

DeviceProbe probe_devices() {
  DeviceProbe probe;
  // Without a driver this returns cudaErrorInsufficientDriver, without a GPU cudaErrorNoDevice.
  const cudaError_t err = cudaGetDeviceCount(&probe.count);
  if (err != cudaSuccess) {
    probe.count = 0;
    probe.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    (void)cudaGetLastError();  // clear the error so later runtime calls do not report it again
  } else if (probe.count == 0) {
    probe.reason = "the CUDA runtime reports 0 devices";
  }
  return probe;
}

}  // namespace gpu

void cuda_synchronize(int device) { gpu::synchronize(device); }

}  // namespace mantissa
