// What the device functions answer in a build without CUDA (CMake compiles cuda/absent/ only then): no
// devices, and the reason says so. The CUDA build's are framework/cuda/host/device.cc and fill.cu.
#include "framework/cuda/device.h"

#include "framework/cuda/probe.h"
#include "framework/error.h"

namespace mantissa {

namespace gpu {

DeviceProbe probe_devices() { return {.count = 0, .reason = "mantissa was built without CUDA (MANTISSA_CUDA=OFF)"}; }

}  // namespace gpu

void cuda_synchronize(int device) {
  MT_THROW("cuda_synchronize: no CUDA device ", device, ": ", cuda_unavailable_reason());
}

std::vector<float> cuda_fill(int64_t n, float value, int device) {
  (void)n;
  (void)value;
  MT_THROW("cuda_fill: no CUDA device ", device, ": ", cuda_unavailable_reason(),
           ". HINT: configure with -DMANTISSA_CUDA=ON on a machine with nvcc");
}

}  // namespace mantissa
