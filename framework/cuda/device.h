// CUDA device discovery and a toolchain smoke kernel. Declared in every build: without MANTISSA_CUDA
// (or without a driver or a GPU) the device count is 0 and the reason says why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mantissa {

// Number of usable CUDA devices: 0 when built without CUDA, when no driver is installed or when no GPU
// is present. Never throws, never aborts; the first call asks the CUDA runtime, later calls reuse it.
int cuda_device_count();

// Why cuda_device_count() is 0, e.g. "cudaErrorNoDevice: no CUDA-capable device is detected";
// empty when at least one device is usable.
std::string cuda_unavailable_reason();

// Waits until the work queued on GPU `device`'s current stream has run (for timing, and before reading
// device memory by other means). Declared in every build; throws without CUDA or without that GPU.
void cuda_synchronize(int device = 0);

// Fills a device buffer of n floats with `value` by a kernel on GPU `device` and copies it back:
// proves that the CUDA code compiled, linked and runs. Throws mantissa::Error without a device.
std::vector<float> cuda_fill(int64_t n, float value, int device = 0);

}  // namespace mantissa
