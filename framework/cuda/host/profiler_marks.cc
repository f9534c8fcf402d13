// The CUDA build's device marks for the profiler (framework/profiler/device_marks.h): CUDA events with timing,
// recorded on the current stream. Written for the GPU; no device has run it yet.
#include <cuda_runtime_api.h>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "framework/profiler/device_marks.h"

namespace mantissa::profiler::detail {

struct DeviceMark {
  cudaEvent_t event = nullptr;
};

DeviceMark* record_device_mark(Device device) {
  auto* mark = new DeviceMark();
  MT_CUDA_CHECK(cudaEventCreate(&mark->event));
  MT_CUDA_CHECK(cudaEventRecord(mark->event, gpu::current_stream(device)));
  return mark;
}

double device_elapsed_ms(DeviceMark* from, DeviceMark* to) {
  if (from == nullptr || to == nullptr) return -1;
  MT_CUDA_CHECK(cudaEventSynchronize(to->event));
  float ms = 0;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, from->event, to->event));
  return ms;
}

void release_device_mark(DeviceMark* mark) {
  if (mark == nullptr) return;
  (void)cudaEventDestroy(mark->event);
  delete mark;
}

}  // namespace mantissa::profiler::detail
