// max_pool2d and avg_pool2d: argument checks, dispatch to ops/pool/pool_cpu (ops/pool/pool_cuda.h for
// CUDA tensors), and their backward.
// max_pool2d's node keeps only the argmax indices (i64, one per output); avg_pool2d's keeps nothing. Both
// gradients are linear in the incoming gradient, so under create_graph they are computed by differentiable
// ops: a scatter-add at the indices, and avg_pool2d's own adjoint (avg_pool2d again).
#include "ops/pool/pool.h"

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/pool/pool_cpu.h"
#include "ops/pool/pool_cuda.h"
#include "ops/shape/shape.h"

namespace mantissa {
namespace {

using cpu::Pool2dGeometry;

void cpu_max_pool2d(const Pool2dGeometry& g, const Tensor& x, const Tensor& out, const Tensor& indices) {
  dispatch_floating(x.dtype(), "max_pool2d", [&]<typename T>() {
    cpu::max_pool2d_forward<T>(g, x.data<T>(), out.data<T>(), indices.data<int64_t>());
  });
}

void cpu_max_pool2d_backward(const Pool2dGeometry& g, const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  dispatch_floating(dx.dtype(), "max_pool2d_backward", [&]<typename T>() {
    cpu::max_pool2d_backward<T>(g, dy.data<T>(), indices.data<int64_t>(), dx.data<T>());
  });
}

void cpu_avg_pool2d(const Pool2dGeometry& g, const Tensor& x, const Tensor& out) {
  dispatch_floating(x.dtype(), "avg_pool2d",
                    [&]<typename T>() { cpu::avg_pool2d_forward<T>(g, x.data<T>(), out.data<T>()); });
}

void cpu_avg_pool2d_backward(const Pool2dGeometry& g, const Tensor& dy, const Tensor& dx) {
  dispatch_floating(dx.dtype(), "avg_pool2d_backward",
                    [&]<typename T>() { cpu::avg_pool2d_backward<T>(g, dy.data<T>(), dx.data<T>()); });
}

constexpr DeviceKernels<decltype(cpu_max_pool2d)> kMaxPool2d{.cpu = &cpu_max_pool2d,
                                                             .cuda = MT_CUDA_KERNEL(cuda_max_pool2d)};
constexpr DeviceKernels<decltype(cpu_max_pool2d_backward)> kMaxPool2dBackward{
    .cpu = &cpu_max_pool2d_backward, .cuda = MT_CUDA_KERNEL(cuda_max_pool2d_backward)};
constexpr DeviceKernels<decltype(cpu_avg_pool2d)> kAvgPool2d{.cpu = &cpu_avg_pool2d,
                                                             .cuda = MT_CUDA_KERNEL(cuda_avg_pool2d)};
constexpr DeviceKernels<decltype(cpu_avg_pool2d_backward)> kAvgPool2dBackward{
    .cpu = &cpu_avg_pool2d_backward, .cuda = MT_CUDA_KERNEL(cuda_avg_pool2d_backward)};

Pool2dGeometry check_and_plan(const Tensor& x, const Pool2dOptions& opt, std::string_view op) {
  MT_CHECK(x.defined(), op, ": input is undefined");
  MT_CHECK(x.dim() == 4, op, ": input must be [N, C, H, W] or [C, H, W], got ", shape_str(x.shape()));
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", dtype_name(x.dtype()));
  kernel_for(op, kMaxPool2d, x.device());  // both pools have kernels on the same devices
  // An empty H or W with padding would pass the size check below but leave windows of padding only, whose
  // kernels (CPU and CUDA) would read the first element of an empty plane. PyTorch refuses these too.
  MT_CHECK(x.size(2) > 0 && x.size(3) > 0, op, ": input ", shape_str(x.shape()),
           " has an empty height or width. HINT: only the batch and channel dims may be 0");
  Pool2dGeometry g{.planes = x.size(0) * x.size(1), .h = x.size(2), .w = x.size(3)};
  int64_t k[2], s[2], p[2];
  for (int i = 0; i < 2; ++i) {
    k[i] = opt.kernel_size[i];
    s[i] = opt.stride[i] == 0 ? k[i] : opt.stride[i];
    p[i] = opt.padding[i];
    MT_CHECK(k[i] > 0, op, ": kernel_size must be positive, got [", opt.kernel_size[0], ", ", opt.kernel_size[1], "]");
    MT_CHECK(s[i] > 0, op, ": stride must be positive (0 means = kernel), got [", opt.stride[0], ", ", opt.stride[1],
             "]");
    MT_CHECK(p[i] >= 0 && 2 * p[i] <= k[i], op, ": padding must be between 0 and half the kernel, got padding [",
             opt.padding[0], ", ", opt.padding[1], "] for kernel [", opt.kernel_size[0], ", ", opt.kernel_size[1], "]");
  }
  g.kh = k[0], g.kw = k[1], g.stride_h = s[0], g.stride_w = s[1], g.pad_h = p[0], g.pad_w = p[1];
  g.oh = (g.h + 2 * g.pad_h - g.kh) / g.stride_h + 1;
  g.ow = (g.w + 2 * g.pad_w - g.kw) / g.stride_w + 1;
  MT_CHECK(g.h + 2 * g.pad_h >= g.kh && g.w + 2 * g.pad_w >= g.kw, op, ": input ", shape_str(x.shape()),
           " with padding [", g.pad_h, ", ", g.pad_w, "] is smaller than the kernel [", g.kh, ", ", g.kw,
           "]. HINT: use a smaller kernel or pool a larger input");
  return g;
}

Shape out_shape(const Tensor& x, const Pool2dGeometry& g) { return {x.size(0), x.size(1), g.oh, g.ow}; }

struct MaxPool2dBackward final : Node {
  SavedTensor indices{this, "indices"};
  Pool2dGeometry geometry;
  Shape input_shape;
  DType dtype = DType::kF32;
  std::string_view name() const override { return "MaxPool2dBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    if (compute_requires_grad({&grads[0]})) {
      // create_graph: each plane's gradient scatter-added at the argmax (indices count within the plane).
      const Pool2dGeometry& g = geometry;
      const Tensor dy = grads[0].reshape({g.planes, g.oh * g.ow});
      const Tensor zero = zeros({g.planes, g.h * g.w}, {.dtype = dy.dtype(), .device = dy.device()});
      return {scatter_add(zero, 1, indices.get().view({g.planes, g.oh * g.ow}), dy).view(input_shape)};
    }
    const Tensor dy = grads[0].contiguous();
    Tensor dx = empty(input_shape, {.dtype = dtype, .device = dy.device()});
    dispatch(name(), kMaxPool2dBackward, dy.device(), geometry, dy, indices.get(), dx);
    return {dx};
  }
};

Pool2dOptions options_of(const Pool2dGeometry& g) {
  return {.kernel_size = {g.kh, g.kw}, .stride = {g.stride_h, g.stride_w}, .padding = {g.pad_h, g.pad_w}};
}

// The node of avg_pool2d's gradient under create_graph: that gradient is the adjoint of the pooling, so
// its own gradient is the pooling again.
struct AvgPool2dBackwardBackward final : Node {
  Pool2dGeometry geometry;
  std::string_view name() const override { return "AvgPool2dBackwardBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    return {avg_pool2d(grads[0], options_of(geometry))};
  }
};

struct AvgPool2dBackward final : Node {
  Pool2dGeometry geometry;
  Shape input_shape;
  DType dtype = DType::kF32;
  std::string_view name() const override { return "AvgPool2dBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor dy = grads[0].contiguous();
    Tensor dx = empty(input_shape, {.dtype = dtype, .device = dy.device()});
    dispatch(name(), kAvgPool2dBackward, dy.device(), geometry, dy, dx);
    if (compute_requires_grad({&grads[0]})) {
      auto node = make_node<AvgPool2dBackwardBackward>({&grads[0]});
      node->geometry = geometry;
      set_history(dx, node);
    }
    return {dx};
  }
};

}  // namespace

Tensor max_pool2d(const Tensor& x, Pool2dOptions options) {
  if (x.defined() && x.dim() == 3) return max_pool2d(x.unsqueeze(0), options).squeeze(0);
  const Pool2dGeometry g = check_and_plan(x, options, "max_pool2d");
  const Tensor xc = x.contiguous();
  Tensor out = empty(out_shape(x, g), {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(out_shape(x, g), {.dtype = DType::kI64, .device = x.device()});
  dispatch("max_pool2d", kMaxPool2d, x.device(), g, xc, out, indices);
  if (compute_requires_grad({&x})) {
    auto node = make_node<MaxPool2dBackward>({&x});
    node->indices = indices;
    node->geometry = g;
    node->input_shape = x.shape();
    node->dtype = x.dtype();
    set_history(out, node);
  }
  return out;
}

Tensor avg_pool2d(const Tensor& x, Pool2dOptions options) {
  if (x.defined() && x.dim() == 3) return avg_pool2d(x.unsqueeze(0), options).squeeze(0);
  const Pool2dGeometry g = check_and_plan(x, options, "avg_pool2d");
  const Tensor xc = x.contiguous();
  Tensor out = empty(out_shape(x, g), {.dtype = x.dtype(), .device = x.device()});
  dispatch("avg_pool2d", kAvgPool2d, x.device(), g, xc, out);
  if (compute_requires_grad({&x})) {
    auto node = make_node<AvgPool2dBackward>({&x});
    node->geometry = g;
    node->input_shape = x.shape();
    node->dtype = x.dtype();
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa
