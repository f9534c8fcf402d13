// dropout's typed entry and backward: the bool mask is drawn once, saved, and reused by the backward.
#include "ops/dropout/dropout.h"

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/dropout/dropout_cpu.h"
#include "ops/dropout/dropout_cuda.h"
#include "ops/elementwise/elementwise.h"

namespace mantissa {
namespace {

void cpu_masked_scale(const Tensor& t, const Tensor& mask, double scale, const Tensor& out) {
  dispatch_floating(t.dtype(), "dropout", [&]<typename T>() {
    cpu::dropout_apply<T>(t.data<T>(), mask.data<bool>(), scale, out.data<T>(), t.numel());
  });
}

// The mask from the generator's stream (keep with probability keep, as torch.bernoulli(keep)), then
// the masked scale.
void cpu_dropout(const Tensor& x, float keep, double scale, Generator& gen, const Tensor& mask, const Tensor& out) {
  cpu::dropout_mask(gen, keep, mask.data<bool>(), mask.numel());
  cpu_masked_scale(x, mask, scale, out);
}

constexpr DeviceKernels<decltype(cpu_masked_scale)> kMaskedScale{.cpu = &cpu_masked_scale,
                                                                 .cuda = MT_CUDA_KERNEL(cuda_masked_scale)};
constexpr DeviceKernels<decltype(cpu_dropout)> kDropout{.cpu = &cpu_dropout, .cuda = MT_CUDA_KERNEL(cuda_dropout)};

// out = mask ? t * scale : 0, in t's dtype (t is made contiguous).
Tensor masked_scale(const Tensor& t_in, const Tensor& mask, double scale) {
  const Tensor t = t_in.contiguous();
  Tensor out = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
  dispatch("dropout", kMaskedScale, t.device(), t, mask, scale, out);
  return out;
}

struct DropoutBackward final : Node {
  SavedTensor mask{this, "mask"};  // bool, contiguous, x's shape
  double scale = 1.0;
  std::string_view name() const override { return "DropoutBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (compute_requires_grad({&grads[0]})) {  // create_graph: the same masked scale through where() and mul
      return {where(mask.get(), mul(grads[0], scale),
                    full({}, 0.0, {.dtype = grads[0].dtype(), .device = grads[0].device()}))};
    }
    return {masked_scale(grads[0], mask.get(), scale)};
  }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, Generator* generator) {
  MT_CHECK(x.defined(), "dropout: the input is undefined");
  MT_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  MT_CHECK(is_floating(x.dtype()), "dropout: expected a floating tensor, got ", dtype_name(x.dtype()), " ",
           shape_str(x.shape()));
  kernel_for("dropout", kDropout, x.device());
  if (p == 0.0) return x;
  Tensor mask = empty(x.shape(), {.dtype = DType::kBool, .device = x.device()});
  double scale = 0.0;
  Tensor out;
  if (p == 1.0) {
    fill_(mask, 0.0);
    out = masked_scale(x, mask, scale);
  } else {
    scale = 1.0 / (1.0 - p);
    const Tensor xc = x.contiguous();
    out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    dispatch("dropout", kDropout, x.device(), xc, static_cast<float>(1.0 - p), scale,
             generator ? *generator : default_generator(), mask, out);
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<DropoutBackward>({&x});
    node->mask = mask;
    node->scale = scale;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa
