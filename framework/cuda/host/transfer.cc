// CUDA copy_, fill_ and accumulate_: which path a copy takes (H2D, D2H, D2D, peer), staging buffers, streams;
// and HostCopy's copy to pinned memory behind an event.
#include "framework/cuda/transfer.h"

#include <utility>

#include "framework/cuda/allocator.h"
#include "framework/cuda/check.h"
#include "framework/cuda/copy_kernels.h"
#include "framework/cuda/stream.h"
#include "framework/host_read.h"

namespace mantissa::gpu {
namespace {

size_t byte_count(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }

Tensor empty_on(const Tensor& like, DType dtype, Device device) {
  return empty(like.shape(), {.dtype = dtype, .device = device});
}

// Both tensors on one GPU; asynchronous on its current stream.
void copy_same_device(const Tensor& dst, const Tensor& src) {
  const Device device = dst.device();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), byte_count(dst), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  StridedOffsets<2> geom;
  if (plan_strided<2>(dst.shape(), {&dst.strides(), &src.strides()}, geom)) {
    launch_copy(dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype(), geom, dst.numel(), stream);
    return;
  }
  // More than 8 dims that do not merge: gather the source first, then scatter into the destination.
  MT_CHECK(!src.is_contiguous() && !dst.is_contiguous(), "copy_: the CUDA kernel handles at most ", kMaxDims,
           " dims that do not merge; the ", src.is_contiguous() ? "destination" : "source", " of shape ",
           shape_str(dst.shape()), " has more. HINT: reshape to fewer dims");
  const Tensor gathered = empty_on(src, src.dtype(), device);
  copy_same_device(gathered, src);
  copy_same_device(dst, gathered);
}

void copy_host_to_device(const Tensor& dst, const Tensor& src) {
  const Device device = dst.device();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  // The bytes to send, contiguous, pinned and in the destination's dtype (the CPU casts give the GPU's bits).
  Tensor host = src;
  if (!(is_pinned(src) && src.is_contiguous() && src.dtype() == dst.dtype())) {
    host = empty_pinned(src.shape(), dst.dtype());
    copy_(host, src);
  }
  const Tensor landing = dst.is_contiguous() ? dst : empty_on(dst, dst.dtype(), device);
  MT_CUDA_CHECK(cudaMemcpyAsync(landing.data_ptr(), host.data_ptr(), byte_count(dst), cudaMemcpyHostToDevice, stream));
  record_stream(host, stream);  // the pinned block is not reused before the copy has run
  if (!landing.is_same(dst)) copy_same_device(dst, landing);
}

void copy_device_to_host(const Tensor& dst, const Tensor& src) {
  const Device device = src.device();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  Tensor packed = src;
  if (!src.is_contiguous()) {
    packed = empty_on(src, src.dtype(), device);
    copy_same_device(packed, src);
  }
  const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype();
  const Tensor host = direct ? dst : empty_pinned(src.shape(), src.dtype());
  MT_CUDA_CHECK(cudaMemcpyAsync(host.data_ptr(), packed.data_ptr(), byte_count(src), cudaMemcpyDeviceToHost, stream));
  // The host reads the result next: wait for it (what makes a D2H copy a sync point).
  notify_host_read(HostRead::kDeviceToHost);
  MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (!direct) copy_(dst, host);
}

// Different GPUs: the source, packed in the destination's dtype on its own GPU, goes over by a peer copy
// on the destination's stream. The two streams are ordered both ways: the copy waits for the work queued
// on the source's stream (what wrote the source), and the source's stream waits for the copy, so that work
// queued there next (an in-place update of the source, a reuse of the packed block) cannot overwrite the
// bytes while the peer copy still reads them.
void copy_between_devices(const Tensor& dst, const Tensor& src) {
  Tensor packed = src;
  if (!(src.is_contiguous() && src.dtype() == dst.dtype())) {
    packed = empty_on(src, dst.dtype(), src.device());
    copy_same_device(packed, src);
  }
  cudaEvent_t ready = nullptr;
  {
    DeviceGuard guard(src.device());
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(ready, current_stream(src.device())));
  }
  DeviceGuard guard(dst.device());
  const cudaStream_t stream = current_stream(dst.device());
  const Tensor landing = dst.is_contiguous() ? dst : empty_on(dst, dst.dtype(), dst.device());
  MT_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
  MT_CUDA_CHECK(cudaEventDestroy(ready));  // released by CUDA once the wait is done
  MT_CUDA_CHECK(cudaMemcpyPeerAsync(landing.data_ptr(), dst.device().index, packed.data_ptr(), src.device().index,
                                    byte_count(dst), stream));
  // The source's stream waits for the copy. The event is created on the destination's device, where it is
  // recorded; another device's stream may wait on it. Destroying it right after the wait is queued is
  // safe: CUDA releases it once the recorded work is done, and the wait keeps the state it saw.
  cudaEvent_t copied = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  MT_CUDA_CHECK(cudaEventRecord(copied, stream));
  {
    DeviceGuard src_guard(src.device());  // with the waiting stream's device current, as the first wait has
    MT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(src.device()), copied, 0));
  }
  MT_CUDA_CHECK(cudaEventDestroy(copied));
  // The block may belong to another stream of the source's GPU than the one that just waited (src itself,
  // allocated under another StreamGuard): the allocator then holds it until the peer copy is done too.
  record_stream(packed, stream);
  if (!landing.is_same(dst)) copy_same_device(dst, landing);
}

}  // namespace

void copy_cuda(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  if (src.device().is_cpu()) return copy_host_to_device(dst, src);
  if (dst.device().is_cpu()) return copy_device_to_host(dst, src);
  if (src.device() != dst.device()) return copy_between_devices(dst, src);
  copy_same_device(dst, src);
}

namespace {

class EventCopyToHost final : public CopyToHost {
 public:
  explicit EventCopyToHost(cudaEvent_t done) : done_(done) {}
  ~EventCopyToHost() override {
    if (done_ != nullptr) (void)cudaEventDestroy(done_);  // an abandoned copy: its waiter already failed
  }
  bool done() override {
    if (done_ == nullptr) return true;
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // a query that says "not yet" is not an error to leave behind
      return false;
    }
    MT_CUDA_CHECK(status);
    return true;
  }
  void wait() override {
    if (done_ == nullptr) return;
    MT_CUDA_CHECK(cudaEventSynchronize(done_));
    MT_CUDA_CHECK(cudaEventDestroy(std::exchange(done_, nullptr)));
  }

 private:
  cudaEvent_t done_;
};

}  // namespace

std::unique_ptr<CopyToHost> start_copy_to_host(const Tensor& dst, const Tensor& src) {
  MT_CHECK(
      dst.device().is_cpu() && is_pinned(dst) && dst.is_contiguous() && src.device().is_cuda() && src.is_contiguous() &&
          dst.dtype() == src.dtype() && dst.numel() == src.numel(),
      "start_copy_to_host: needs a contiguous GPU source and a pinned contiguous host tensor of its dtype and size");
  const Device device = src.device();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  cudaEvent_t done = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  auto copy = std::make_unique<EventCopyToHost>(done);  // owns the event from here on
  if (src.numel() > 0) {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), byte_count(src), cudaMemcpyDeviceToHost, stream));
  }
  MT_CUDA_CHECK(cudaEventRecord(done, stream));
  return copy;
}

void fill_cuda(const Tensor& dst, uint64_t bits) {
  if (dst.numel() == 0) return;
  StridedOffsets<1> geom;
  MT_CHECK(plan_strided<1>(dst.shape(), {&dst.strides()}, geom), "fill_: the CUDA kernel handles at most ", kMaxDims,
           " dims that do not merge; shape ", shape_str(dst.shape()), " has more");
  DeviceGuard guard(dst.device());
  launch_fill(dst.data_ptr(), element_size(dst.dtype()), bits, geom, dst.numel(), current_stream(dst.device()));
}

void accumulate_cuda(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.device() == src.device(), "accumulate_: tensors on different devices: ", dst.device().str(),
           " += ", src.device().str(), ". HINT: move the gradient with .to(device) first");
  if (dst.numel() == 0) return;
  StridedOffsets<2> geom;
  MT_CHECK(plan_strided<2>(dst.shape(), {&dst.strides(), &src.strides()}, geom),
           "accumulate_: the CUDA kernel handles at most ", kMaxDims, " dims that do not merge; shape ",
           shape_str(dst.shape()), " has more");
  DeviceGuard guard(dst.device());
  launch_accumulate(dst.data_ptr(), src.data_ptr(), dst.dtype(), geom, dst.numel(), current_stream(dst.device()));
}

}  // namespace mantissa::gpu
