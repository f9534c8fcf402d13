// The smoke kernel behind cuda_fill, in the three tiers: kernel over raw pointers, launcher, entry.
#include <algorithm>
#include <memory>

#include "framework/cuda/check.h"
#include "framework/cuda/device.h"
#include "framework/cuda/stream.h"

namespace mantissa {
namespace {

// out[i] = value for i in [0, n); grid-stride, so any n fits one launch.
__global__ void fill_kernel(float* out, int64_t n, float value) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = value;
}

void launch_fill(float* out, int64_t n, float value, cudaStream_t stream) {
  constexpr int kBlock = 256;
  const int64_t blocks = std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, 65535);
  fill_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(out, n, value);
  MT_CUDA_CHECK(cudaGetLastError());
}

struct CudaFree {
  void operator()(float* p) const { (void)cudaFree(p); }
};

}  // namespace

std::vector<float> cuda_fill(int64_t n, float value, int device) {
  MT_CHECK(n >= 0, "cuda_fill: n must be >= 0, got ", n);
  MT_CHECK(device >= 0 && device < cuda_device_count(), "cuda_fill: no CUDA device ", device, " (", cuda_device_count(),
           " present", cuda_device_count() == 0 ? ": " + cuda_unavailable_reason() : std::string(),
           "). HINT: run on a machine with an NVIDIA GPU and driver");
  std::vector<float> host(static_cast<size_t>(n));
  if (n == 0) return host;
  gpu::DeviceGuard guard(device);
  float* raw = nullptr;
  MT_CUDA_CHECK(cudaMalloc(&raw, host.size() * sizeof(float)));
  std::unique_ptr<float, CudaFree> buffer(raw);
  launch_fill(buffer.get(), n, value, /*stream=*/nullptr);
  MT_CUDA_CHECK(cudaMemcpy(host.data(), buffer.get(), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace mantissa
