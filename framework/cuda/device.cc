// cuda_device_count / cuda_unavailable_reason for every build; the cuda_fill stub when built without
// CUDA (the real one, with its kernel, is in fill.cu).
#include "framework/cuda/device.h"

#include "framework/error.h"

#ifdef MANTISSA_WITH_CUDA
#include <cuda_runtime_api.h>

#include "framework/cuda/stream.h"
#endif

namespace mantissa {
namespace {

struct CudaProbe {
  int count = 0;
  std::string reason;  // empty when count > 0
};

CudaProbe probe_cuda() {
  CudaProbe probe;
#ifdef MANTISSA_WITH_CUDA
  // Without a driver this returns cudaErrorInsufficientDriver, without a GPU cudaErrorNoDevice.
  const cudaError_t err = cudaGetDeviceCount(&probe.count);
  if (err != cudaSuccess) {
    probe.count = 0;
    probe.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    (void)cudaGetLastError();  // clear the error so later runtime calls do not report it again
  } else if (probe.count == 0) {
    probe.reason = "the CUDA runtime reports 0 devices";
  }
#else
  probe.reason = "mantissa was built without CUDA (MANTISSA_CUDA=OFF)";
#endif
  return probe;
}

const CudaProbe& cached_probe() {
  static const CudaProbe probe = probe_cuda();
  return probe;
}

}  // namespace

int cuda_device_count() { return cached_probe().count; }

std::string cuda_unavailable_reason() { return cached_probe().reason; }

#ifdef MANTISSA_WITH_CUDA
void cuda_synchronize(int device) { gpu::synchronize(device); }
#else
void cuda_synchronize(int device) {
  MT_THROW("cuda_synchronize: no CUDA device ", device, ": ", cuda_unavailable_reason());
}

std::vector<float> cuda_fill(int64_t n, float value, int device) {
  (void)n;
  (void)value;
  MT_THROW("cuda_fill: no CUDA device ", device, ": ", cuda_unavailable_reason(),
           ". HINT: configure with -DMANTISSA_CUDA=ON on a machine with nvcc");
}
#endif

}  // namespace mantissa
