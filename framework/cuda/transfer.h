// The CUDA paths of copy_, fill_ and accumulate_ (framework/copy.cc sends every call with a CUDA tensor
// here): host <-> device transfers staged through pinned memory, peer copies, and device-side casts and
// strided copies; plus the host-side planning of the strided kernels (every build; tested on the CPU).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "framework/cuda/copy_math.h"
#include "framework/strided.h"
#include "framework/tensor.h"

namespace mantissa::gpu {

// The kernel geometry of N operands sharing `shape`, dims coalesced as the CPU loops do; false when more
// than kMaxDims dims remain.
template <size_t N>
bool plan_strided(const Shape& shape, const std::array<const Shape*, N>& strides,
                  StridedOffsets<static_cast<int>(N)>& out) {
  const StridedLayout<N> layout = coalesce<N>(shape, strides);
  if (layout.shape.size() > static_cast<size_t>(kMaxDims)) return false;
  out.ndim = static_cast<int>(layout.shape.size());
  for (size_t d = 0; d < layout.shape.size(); ++d) {
    out.sizes[d] = layout.shape[d];
    for (size_t k = 0; k < N; ++k) out.strides[k][d] = layout.strides[k][d];
  }
  return true;
}

// The CUDA typed entries of copy_, fill_ and accumulate_, declared in every build and defined in CUDA
// builds only (framework/cuda/host/transfer.cc): framework/copy.cc names them in its DeviceKernels tables.
// Any pair of devices with at least one GPU; shapes already checked equal. Host -> device is
// asynchronous on the destination's current stream (the source is staged in pinned memory unless it is
// pinned already); device -> host waits for the copy (a sync point); device -> device is asynchronous.
void copy_cuda(const Tensor& dst, const Tensor& src);
// Every element of the CUDA tensor `dst` = the element_size(dtype)-byte pattern in the low bytes of `bits`.
void fill_cuda(const Tensor& dst, uint64_t bits);
// dst += src on one GPU; same shape and dtype (checked by the caller), floating.
void accumulate_cuda(const Tensor& dst, const Tensor& src);

// HostCopy's GPU side (framework/host_read.h): a copy from a GPU tensor into pinned host memory, in flight
// behind an event recorded after it.
class CopyToHost {
 public:
  virtual ~CopyToHost() = default;
  // Whether the copy has landed.
  virtual bool done() = 0;
  // Waits until it has (not reported to the host-read observer: HostCopy::wait reports).
  virtual void wait() = 0;
};
// Starts copying the contiguous GPU tensor `src` into the pinned contiguous CPU tensor `dst` (same shape
// and dtype) on src's current stream. CUDA builds only (host_read.cc names it in a DeviceKernels table).
std::unique_ptr<CopyToHost> start_copy_to_host(const Tensor& dst, const Tensor& src);

}  // namespace mantissa::gpu
