// CUDA cumsum along one dim: a thread per [outer, inner] line (adjacent threads read adjacent inner
// elements), sequential along the line so the sums equal the CPU's bit for bit.
#include <cuda_runtime_api.h>

#include "framework/cuda/check.h"
#include "framework/cuda/stream.h"
#include "ops/cuda/device_types.cuh"
#include "ops/cuda/offset_calc.h"
#include "ops/reduce/scan_cuda.h"

namespace mantissa::gpu {
namespace {

template <typename D>
__global__ void cumsum_lines_kernel(const D* __restrict__ x, int64_t outer, int64_t size, int64_t inner,
                                    cpu::ScanDirection direction, D* __restrict__ out) {
  for (int64_t line = global_thread(); line < outer * inner; line += grid_threads()) {
    const int64_t base = (line / inner) * size * inner + line % inner;
    compute_t<D> acc = 0;
    for (int64_t k = 0; k < size; ++k) {
      const int64_t j = direction == cpu::ScanDirection::kForward ? k : size - 1 - k;
      acc += load(x[base + j * inner]);
      out[base + j * inner] = store<D>(acc);
    }
  }
}

}  // namespace

// out[o, k, i] = sum of x[o, j, i] for j <= k (kForward) or j >= k (kReverse); x, out contiguous
// [outer, size, inner].
template <typename T>
void launch_cumsum_lines(const T* x, int64_t outer, int64_t size, int64_t inner, cpu::ScanDirection direction, T* out,
                         cudaStream_t stream) {
  if (outer * inner * size == 0) return;
  const LaunchGeometry g = elementwise_geometry(outer * inner);
  cumsum_lines_kernel<<<g.blocks, g.threads, 0, stream>>>(dev(x), outer, size, inner, direction, dev(out));
  MT_CUDA_CHECK(cudaGetLastError());
}

template void launch_cumsum_lines<float>(const float*, int64_t, int64_t, int64_t, cpu::ScanDirection, float*,
                                         cudaStream_t);
template void launch_cumsum_lines<double>(const double*, int64_t, int64_t, int64_t, cpu::ScanDirection, double*,
                                          cudaStream_t);
template void launch_cumsum_lines<Half>(const Half*, int64_t, int64_t, int64_t, cpu::ScanDirection, Half*,
                                        cudaStream_t);
template void launch_cumsum_lines<BFloat16>(const BFloat16*, int64_t, int64_t, int64_t, cpu::ScanDirection, BFloat16*,
                                            cudaStream_t);

}  // namespace mantissa::gpu

// Typed entries (the tensors' side of the launcher above): the CUDA side of cumsum
// (ops/reduce/logsumexp_prod_norm_cumsum.cc).
namespace mantissa {

void cuda_scan(const Tensor& x, int64_t outer, int64_t n, int64_t inner, cpu::ScanDirection direction,
               const Tensor& out) {
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "cumsum", [&]<typename T>() {
    gpu::launch_cumsum_lines<T>(x.data<T>(), outer, n, inner, direction, out.data<T>(),
                                gpu::current_stream(x.device()));
  });
}

}  // namespace mantissa
