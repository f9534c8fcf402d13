// dropout's typed entry and backward: the bool mask is drawn once, saved, and reused by the backward.
#include "ops/dropout.h"

#include "framework/autograd.h"
#include "ops/cpu/dropout.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "ops/cuda/embedding_dropout.h"
#include "ops/cuda/philox.h"
#endif

namespace mantissa {
namespace {

// out = mask ? t * scale : 0, in t's dtype (t is made contiguous).
Tensor masked_scale(const Tensor& t_in, const Tensor& mask, double scale) {
  const Tensor t = t_in.contiguous();
  Tensor out = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
#ifdef MANTISSA_WITH_CUDA
  if (t.device().is_cuda()) {
    gpu::DeviceGuard guard(t.device());
    dispatch_floating(t.dtype(), "dropout", [&]<typename T>() {
      gpu::launch_dropout_apply<T>(t.data<T>(), mask.data<bool>(), scale, out.data<T>(), t.numel(),
                                   gpu::current_stream(t.device()));
    });
    return out;
  }
#endif
  dispatch_floating(t.dtype(), "dropout", [&]<typename T>() {
    cpu::dropout_apply<T>(t.data<T>(), mask.data<bool>(), scale, out.data<T>(), t.numel());
  });
  return out;
}

struct DropoutBackward final : Node {
  SavedTensor mask{this, "mask"};  // bool, contiguous, x's shape
  double scale = 1.0;
  std::string_view name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override { return {masked_scale(grads[0], mask.get(), scale)}; }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, Generator* generator) {
  MT_CHECK(x.defined(), "dropout: the input is undefined");
  MT_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  MT_CHECK(is_floating(x.dtype()), "dropout: expected a floating tensor, got ", dtype_name(x.dtype()), " ",
           shape_str(x.shape()));
#ifdef MANTISSA_WITH_CUDA
  const bool on_cuda = x.device().is_cuda();
#else
  const bool on_cuda = false;
#endif
  MT_CHECK(x.device().is_cpu() || on_cuda, "dropout: no kernel for ", x.device().str(), " in this build");
  if (p == 0.0) return x;
  Tensor mask = empty(x.shape(), {.dtype = DType::kBool, .device = x.device()});
  double scale = 0.0;
#ifdef MANTISSA_WITH_CUDA
  if (on_cuda && p < 1.0) {
    // The mask from the generator's own stream, drawn on the device: the same mask as the CPU would
    // draw, and the generator advances past the words used, as on the CPU.
    Generator& gen = generator ? *generator : default_generator();
    const GeneratorState state = gen.state();
    const uint64_t n = static_cast<uint64_t>(x.numel());
    gen.set_state(gpu::advance(state, n));
    scale = 1.0 / (1.0 - p);
    const Tensor xc = x.contiguous();
    Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    gpu::DeviceGuard guard(x.device());
    dispatch_floating(x.dtype(), "dropout", [&]<typename T>() {
      gpu::launch_dropout_forward<T>(state.seed, gpu::stream_position(state), static_cast<float>(1.0 - p), scale,
                                     xc.data<T>(), mask.data<bool>(), out.data<T>(), x.numel(),
                                     gpu::current_stream(x.device()));
    });
    if (compute_requires_grad({&x})) {
      auto node = make_node<DropoutBackward>({&x});
      node->mask = mask;
      node->scale = scale;
      set_history(out, node);
    }
    return out;
  }
#endif
  if (p == 1.0) {
    fill_(mask, 0.0);
  } else {
    // keep with probability 1 - p, as torch.bernoulli(1 - p).
    cpu::dropout_mask(generator ? *generator : default_generator(), static_cast<float>(1.0 - p),
                      mask.data<bool>(), mask.numel());
    scale = 1.0 / (1.0 - p);
  }
  Tensor out = masked_scale(x, mask, scale);
  if (compute_requires_grad({&x})) {
    auto node = make_node<DropoutBackward>({&x});
    node->mask = mask;
    node->scale = scale;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa
