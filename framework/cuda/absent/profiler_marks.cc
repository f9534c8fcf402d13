// A build without CUDA has no device marks for the profiler (framework/profiler/device_marks.h).
#include "framework/profiler/device_marks.h"

namespace mantissa::profiler::detail {

struct DeviceMark {};

DeviceMark* record_device_mark(Device) { return nullptr; }
double device_elapsed_ms(DeviceMark*, DeviceMark*) { return -1; }
void release_device_mark(DeviceMark*) {}

}  // namespace mantissa::profiler::detail
