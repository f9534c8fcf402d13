// The CUDA side of ops/reduce_extra.cc's cumsum.
#include "ops/cuda/host/scan.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/scan.h"

namespace mantissa {

void cuda_scan(const Tensor& x, int64_t outer, int64_t n, int64_t inner, cpu::ScanDirection direction,
               const Tensor& out) {
  gpu::DeviceGuard guard(x.device());
  const gpu::ScanOrder order =
      direction == cpu::ScanDirection::kForward ? gpu::ScanOrder::kForward : gpu::ScanOrder::kReverse;
  dispatch_floating(x.dtype(), "cumsum", [&]<typename T>() {
    gpu::launch_cumsum_lines<T>(x.data<T>(), outer, n, inner, order, out.data<T>(), gpu::current_stream(x.device()));
  });
}

}  // namespace mantissa
