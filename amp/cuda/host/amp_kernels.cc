// The CUDA side of amp/unscale_grads.cc and of the GradScaler's update(): device pointers from the tensors,
// grads grouped by dtype, and the launches on the device's current stream.
#include "amp/cuda/host/amp_kernels.h"

#include <map>
#include <utility>
#include <vector>

#include "amp/cuda/amp_kernels.h"
#include "framework/cuda/stream.h"

namespace mantissa {

void cuda_unscale_grads(std::span<const Tensor> grads, const Tensor* inv_scale, const Tensor& found_inf) {
  // All grads of one dtype in one multi-tensor sweep, nothing read on the host.
  std::map<DType, std::pair<std::vector<void*>, std::vector<int64_t>>> by_dtype;
  for (const Tensor& g : grads) {
    auto& [ptrs, sizes] = by_dtype[g.dtype()];
    ptrs.push_back(g.data_ptr());
    sizes.push_back(g.numel());
  }
  const Device device = found_inf.device();
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  const gpu::GradPass pass = inv_scale != nullptr ? gpu::GradPass::kUnscale : gpu::GradPass::kCheckOnly;
  for (const auto& [dtype, list] : by_dtype)
    gpu::unscale_and_check(dtype, list.first, list.second, inv_scale ? inv_scale->data<float>() : nullptr,
                           found_inf.data<float>(), pass, stream);
}

void cuda_update_loss_scale(const Tensor& scale, const Tensor& inv_scale, const Tensor& counters,
                            std::span<const Tensor> found_inf, const amp::loss_scale::Rule& rule) {
  std::vector<const float*> flags;
  for (const Tensor& f : found_inf) flags.push_back(f.data<float>());
  const Device device = scale.device();
  gpu::DeviceGuard guard(device);
  gpu::update_loss_scale(scale.data<float>(), inv_scale.data<float>(), counters.data<int64_t>(), flags, rule,
                         gpu::current_stream(device));
}

}  // namespace mantissa
