// The CUDA side of ops/dropout.cc: launches on the tensors' device's current stream.
#include "ops/cuda/host/dropout.h"

#include "framework/cuda/stream.h"
#include "ops/cuda/embedding_dropout.h"
#include "ops/cuda/philox.h"

namespace mantissa {

void cuda_masked_scale(const Tensor& t, const Tensor& mask, double scale, const Tensor& out) {
  gpu::DeviceGuard guard(t.device());
  dispatch_floating(t.dtype(), "dropout", [&]<typename T>() {
    gpu::launch_dropout_apply<T>(t.data<T>(), mask.data<bool>(), scale, out.data<T>(), t.numel(),
                                 gpu::current_stream(t.device()));
  });
}

void cuda_dropout(const Tensor& x, float keep, double scale, Generator& gen, const Tensor& mask, const Tensor& out) {
  const GeneratorState state = gen.state();
  gen.set_state(gpu::advance(state, static_cast<uint64_t>(x.numel())));
  gpu::DeviceGuard guard(x.device());
  dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
    gpu::launch_dropout_forward<T>(state.seed, gpu::stream_position(state), keep, scale, x.data<T>(), mask.data<bool>(),
                                   out.data<T>(), x.numel(), gpu::current_stream(x.device()));
  });
}

}  // namespace mantissa
