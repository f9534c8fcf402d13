// Device time for the profiler's events on a GPU: a CUDA event recorded on the device's current stream where
// an event starts and another where it ends; the times between them are read when the session stops. Written
// for the GPU: no device has run it yet. A build without CUDA has no marks (framework/cuda/absent/).
#pragma once

#include "framework/device.h"

namespace mantissa::profiler::detail {

struct DeviceMark;  // a cudaEvent_t

// A mark on `device`'s current stream, or null (no CUDA in this build).
DeviceMark* record_device_mark(Device device);
// Milliseconds from `from` to `to` on the device, waiting for `to`; negative when either is null.
double device_elapsed_ms(DeviceMark* from, DeviceMark* to);
void release_device_mark(DeviceMark* mark);

}  // namespace mantissa::profiler::detail
