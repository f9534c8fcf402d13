// Typed entries for softmax / log_softmax: argument checks, the [outer, dim, inner] geometry, the
// kernels per device (ops/softmax/softmax_cpu.h, ops/softmax/softmax_cuda.h) and the backward node, which keeps only
// the output.
#include "ops/softmax/softmax.h"

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"
#include "ops/softmax/softmax_cpu.h"
#include "ops/softmax/softmax_cuda.h"

namespace mantissa {
namespace {

const char* op_name(SoftmaxKind kind) { return kind == SoftmaxKind::kSoftmax ? "softmax" : "log_softmax"; }

void cpu_softmax(const Tensor& x, const Tensor& y, int64_t dim, SoftmaxKind kind) {
  dispatch_floating(x.dtype(), op_name(kind), [&]<typename T>() {
    cpu::softmax_forward<T>(x.data<T>(), y.data<T>(), softmax_rows(x.shape(), dim), kind);
  });
}

void cpu_softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, int64_t dim, SoftmaxKind kind) {
  dispatch_floating(
      y.dtype(), kind == SoftmaxKind::kSoftmax ? "SoftmaxBackward" : "LogSoftmaxBackward", [&]<typename T>() {
        cpu::softmax_backward<T>(dy.data<T>(), y.data<T>(), dx.data<T>(), softmax_rows(y.shape(), dim), kind);
      });
}

constexpr DeviceKernels<decltype(cpu_softmax)> kSoftmax{.cpu = &cpu_softmax, .cuda = MT_CUDA_KERNEL(cuda_softmax)};
constexpr DeviceKernels<decltype(cpu_softmax_backward)> kSoftmaxBackward{.cpu = &cpu_softmax_backward,
                                                                         .cuda = MT_CUDA_KERNEL(cuda_softmax_backward)};

struct SoftmaxBackward final : Node {
  SavedTensor result{this, "result"};
  SoftmaxKind kind;
  int64_t dim;
  SoftmaxBackward(SoftmaxKind k, int64_t d) : kind(k), dim(d) {}
  std::string_view name() const override {
    return kind == SoftmaxKind::kSoftmax ? "SoftmaxBackward" : "LogSoftmaxBackward";
  }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& y = result.get();
    if (compute_requires_grad({&grads[0], &y})) return {graph_backward(grads[0], y)};
    const Tensor dy = grads[0].contiguous();
    Tensor dx = empty(y.shape(), {.dtype = y.dtype(), .device = y.device()});
    if (y.numel() == 0) return {dx};
    dispatch(name(), kSoftmaxBackward, y.device(), dy, y, dx, dim, kind);
    return {dx};
  }
  // The kernel's formulas with differentiable ops (create_graph); y, the saved output, carries this node
  // as its history. softmax: y (dy - sum(dy y)); log_softmax: dy - exp(y) sum(dy), sums along dim.
  Tensor graph_backward(const Tensor& dy, const Tensor& y) const {
    if (y.dim() == 0) return mul(dy, 0.0);  // one element along dim: the output is constant
    if (kind == SoftmaxKind::kSoftmax) return y * (dy - sum(dy * y, {dim}, KeepDim::kYes));
    return dy - exp(y) * sum(dy, {dim}, KeepDim::kYes);
  }
};

Tensor softmax_impl(const Tensor& x_uncast, int64_t dim_in, SoftmaxKind kind) {
  const char* op = op_name(kind);
  const Tensor x_in = amp::cast_input(kind == SoftmaxKind::kSoftmax ? ops::softmax : ops::log_softmax, x_uncast);
  MT_CHECK(x_in.defined(), op, ": the input is an undefined tensor");
  MT_CHECK(is_floating(x_in.dtype()), op, ": expected a floating tensor (f32, f64, f16, bf16), got ",
           dtype_name(x_in.dtype()), " ", shape_str(x_in.shape()), ". HINT: convert with .to(kFloat32)");
  kernel_for(op, kSoftmax, x_in.device());
  // A 0-d tensor behaves as one element along dim 0 or -1, as in PyTorch.
  const int64_t dim = wrap_dim(dim_in, x_in.dim(), op);
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (x.numel() > 0) dispatch(op, kSoftmax, x.device(), x, y, dim, kind);
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
