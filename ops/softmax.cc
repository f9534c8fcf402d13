// Typed entries for softmax / log_softmax: argument checks, the [outer, dim, inner] geometry, the
// kernel call (ops/cpu/softmax.h) and the backward node, which keeps only the output.
#include "ops/autocast.h"
#include "ops/softmax.h"

#include "framework/autograd.h"
#include "ops/cpu/softmax.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "ops/cuda/softmax.h"
#endif

namespace mantissa {
namespace {

using cpu::SoftmaxKind;

const char* op_name(SoftmaxKind kind) { return kind == SoftmaxKind::kSoftmax ? "softmax" : "log_softmax"; }

// x (contiguous) seen as [outer, size(dim), inner].
cpu::SoftmaxGeometry geometry(const Shape& shape, int64_t dim) {
  cpu::SoftmaxGeometry g;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) g.outer *= shape[d];
    if (d > dim) g.inner *= shape[d];
  }
  g.dim = shape.empty() ? 1 : shape[dim];
  return g;
}

#ifdef MANTISSA_WITH_CUDA
gpu::RowGeometry rows_of(const cpu::SoftmaxGeometry& g) { return {.outer = g.outer, .dim = g.dim, .inner = g.inner}; }
gpu::SoftmaxMode mode_of(SoftmaxKind kind) {
  return kind == SoftmaxKind::kSoftmax ? gpu::SoftmaxMode::kSoftmax : gpu::SoftmaxMode::kLogSoftmax;
}
#endif

struct SoftmaxBackward final : Node {
  SavedTensor result{this, "result"};
  SoftmaxKind kind;
  int64_t dim;
  SoftmaxBackward(SoftmaxKind k, int64_t d) : kind(k), dim(d) {}
  std::string_view name() const override {
    return kind == SoftmaxKind::kSoftmax ? "SoftmaxBackward" : "LogSoftmaxBackward";
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& y = result.get();
    const Tensor dy = grads[0].contiguous();
    Tensor dx = empty(y.shape(), {.dtype = y.dtype(), .device = y.device()});
    if (y.numel() == 0) return {dx};
#ifdef MANTISSA_WITH_CUDA
    if (y.device().is_cuda()) {
      gpu::DeviceGuard guard(y.device());
      dispatch_floating(y.dtype(), name(), [&]<typename T>() {
        gpu::launch_softmax_backward<T>(rows_of(geometry(y.shape(), dim)), mode_of(kind), dy.data<T>(), y.data<T>(),
                                        dx.data<T>(), gpu::current_stream(y.device()));
      });
      return {dx};
    }
#endif
    dispatch_floating(y.dtype(), name(), [&]<typename T>() {
      cpu::softmax_backward<T>(dy.data<T>(), y.data<T>(), dx.data<T>(), geometry(y.shape(), dim), kind);
    });
    return {dx};
  }
};

Tensor softmax_impl(const Tensor& x_uncast, int64_t dim_in, SoftmaxKind kind) {
  const char* op = op_name(kind);
  const Tensor x_in = amp::cast_input(op, x_uncast);
  MT_CHECK(x_in.defined(), op, ": the input is an undefined tensor");
  MT_CHECK(is_floating(x_in.dtype()), op, ": expected a floating tensor (f32, f64, f16, bf16), got ",
           dtype_name(x_in.dtype()), " ", shape_str(x_in.shape()), ". HINT: convert with .to(kFloat32)");
#ifdef MANTISSA_WITH_CUDA
  const bool on_cuda = x_in.device().is_cuda();
#else
  const bool on_cuda = false;
#endif
  MT_CHECK(x_in.device().is_cpu() || on_cuda, op, ": no kernel for ", x_in.device().str(), " in this build");
  // A 0-d tensor behaves as one element along dim 0 or -1, as in PyTorch.
  const int64_t dim = wrap_dim(dim_in, x_in.dim(), op);
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (x.numel() > 0 && on_cuda) {
#ifdef MANTISSA_WITH_CUDA
    gpu::DeviceGuard guard(x.device());
    dispatch_floating(x.dtype(), op, [&]<typename T>() {
      gpu::launch_softmax_forward<T>(rows_of(geometry(x.shape(), dim)), mode_of(kind), x.data<T>(), y.data<T>(),
                                     gpu::current_stream(x.device()));
    });
#endif
  } else if (x.numel() > 0) {
    dispatch_floating(x.dtype(), op, [&]<typename T>() {
      cpu::softmax_forward<T>(x.data<T>(), y.data<T>(), geometry(x.shape(), dim), kind);
    });
  }
  if (compute_requires_grad({&x_in})) {
    auto node = make_node<SoftmaxBackward>({&x_in}, kind, dim);
    node->result = y;
    set_history(y, node);
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, SoftmaxKind::kSoftmax); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, SoftmaxKind::kLogSoftmax); }

}  // namespace mantissa
