// The CUDA side of clip_grad_norm_ (optim/cuda/clip_kernels.cu's three launchers).
#include "framework/cuda/stream.h"
#include "optim/cuda/clip_grad_entries.h"
#include "optim/cuda/clip_kernels.h"
#include "optim/norm_order.h"

namespace mantissa {

// GPU grads: three steps on the current stream, none read on the host: the partials of the f32 grads and
// of the f64 grads (one multi-tensor pass each) into one workspace at the grads' offsets, one block that
// combines them into the total and the coefficient, and one scaling pass per dtype that reads the
// coefficient and returns at once unless it is below 1. Two allocations per call, whatever the number of
// grads: the workspace (the coefficient, then the partials) and the returned total.
Tensor cuda_clip_grad_norm(const std::vector<Tensor>& grads, double max_norm, cpu::NormPartial what) {
  const Device device = grads.front().device();
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  std::vector<int64_t> sizes;
  for (const auto& g : grads) sizes.push_back(g.numel());
  const std::vector<int64_t> offsets = norm_order::partial_offsets(sizes);
  Tensor work = empty({1 + offsets.back()}, {.dtype = DType::kF64, .device = device});
  Tensor total = empty({}, {.dtype = DType::kF64, .device = device});
  double* coef = work.data<double>();
  double* partials = coef + 1;
  struct List {
    std::vector<void*> grads;
    std::vector<int64_t> sizes;
    std::vector<double*> partials;
  };
  List f32, f64;
  for (size_t i = 0; i < grads.size(); ++i) {
    List& list = grads[i].dtype() == DType::kF32 ? f32 : f64;
    list.grads.push_back(grads[i].data_ptr());
    list.sizes.push_back(sizes[i]);
    list.partials.push_back(partials + offsets[i]);
  }
  gpu::norm_partials(f32.grads, f32.sizes, f32.partials, gpu::ClipDType::kF32, what, stream);
  gpu::norm_partials(f64.grads, f64.sizes, f64.partials, gpu::ClipDType::kF64, what, stream);
  gpu::combine_partials(partials, offsets.back(), what, max_norm, total.data<double>(), coef, stream);
  gpu::scale_by_coefficient(f32.grads, f32.sizes, gpu::ClipDType::kF32, coef, stream);
  gpu::scale_by_coefficient(f64.grads, f64.sizes, gpu::ClipDType::kF64, coef, stream);
  return total;
}

}  // namespace mantissa
