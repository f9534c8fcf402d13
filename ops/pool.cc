// max_pool2d and avg_pool2d: argument checks, dispatch to ops/cpu/pool_kernels (ops/cuda/pool.cu for CUDA
// tensors), and their backward.
// max_pool2d's node keeps only the argmax indices (i64, one per output); avg_pool2d's keeps nothing.
#include "ops/pool.h"

#include "framework/autograd.h"
#include "ops/cpu/pool_kernels.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "ops/cuda/pool.h"
#endif

namespace mantissa {
namespace {

using cpu::Pool2dGeometry;

Pool2dGeometry check_and_plan(const Tensor& x, const Pool2dOptions& opt, std::string_view op) {
  MT_CHECK(x.defined(), op, ": input is undefined");
  MT_CHECK(x.dim() == 4, op, ": input must be [N, C, H, W] or [C, H, W], got ", shape_str(x.shape()));
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", dtype_name(x.dtype()));
#ifdef MANTISSA_WITH_CUDA
  const bool on_cuda = x.device().is_cuda();
#else
  const bool on_cuda = false;
#endif
  MT_CHECK(x.device().is_cpu() || on_cuda, op, ": no kernel for ", x.device().str(), " in this build");
  Pool2dGeometry g{.planes = x.size(0) * x.size(1), .h = x.size(2), .w = x.size(3)};
  int64_t k[2], s[2], p[2];
  for (int i = 0; i < 2; ++i) {
    k[i] = opt.kernel_size[i];
    s[i] = opt.stride[i] == 0 ? k[i] : opt.stride[i];
    p[i] = opt.padding[i];
    MT_CHECK(k[i] > 0, op, ": kernel_size must be positive, got [", opt.kernel_size[0], ", ", opt.kernel_size[1],
             "]");
    MT_CHECK(s[i] > 0, op, ": stride must be positive (0 means = kernel), got [", opt.stride[0], ", ",
             opt.stride[1], "]");
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
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor dy = grads[0].contiguous();
    Tensor dx = empty(input_shape, {.dtype = dtype, .device = dy.device()});
#ifdef MANTISSA_WITH_CUDA
    if (dy.device().is_cuda()) {
      gpu::DeviceGuard guard(dy.device());
      dispatch_floating(dtype, "max_pool2d_backward", [&]<typename T>() {
        gpu::launch_max_pool2d_backward<T>(geometry, dy.data<T>(), indices.get().data<int64_t>(), dx.data<T>(),
                                           gpu::current_stream(dy.device()));
      });
      return {dx};
    }
#endif
    dispatch_floating(dtype, "max_pool2d_backward", [&]<typename T>() {
      cpu::max_pool2d_backward<T>(geometry, dy.data<T>(), indices.get().data<int64_t>(), dx.data<T>());
    });
    return {dx};
  }
};

struct AvgPool2dBackward final : Node {
  Pool2dGeometry geometry;
  Shape input_shape;
  DType dtype = DType::kF32;
  std::string_view name() const override { return "AvgPool2dBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor dy = grads[0].contiguous();
    Tensor dx = empty(input_shape, {.dtype = dtype, .device = dy.device()});
#ifdef MANTISSA_WITH_CUDA
    if (dy.device().is_cuda()) {
      gpu::DeviceGuard guard(dy.device());
      dispatch_floating(dtype, "avg_pool2d_backward", [&]<typename T>() {
        gpu::launch_avg_pool2d_backward<T>(geometry, dy.data<T>(), dx.data<T>(), gpu::current_stream(dy.device()));
      });
      return {dx};
    }
#endif
    dispatch_floating(dtype, "avg_pool2d_backward", [&]<typename T>() {
      cpu::avg_pool2d_backward<T>(geometry, dy.data<T>(), dx.data<T>());
    });
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
#ifdef MANTISSA_WITH_CUDA
  if (x.device().is_cuda()) {
    gpu::DeviceGuard guard(x.device());
    dispatch_floating(x.dtype(), "max_pool2d", [&]<typename T>() {
      gpu::launch_max_pool2d_forward<T>(g, xc.data<T>(), out.data<T>(), indices.data<int64_t>(),
                                        gpu::current_stream(x.device()));
    });
  } else
#endif
  dispatch_floating(x.dtype(), "max_pool2d", [&]<typename T>() {
    cpu::max_pool2d_forward<T>(g, xc.data<T>(), out.data<T>(), indices.data<int64_t>());
  });
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
#ifdef MANTISSA_WITH_CUDA
  if (x.device().is_cuda()) {
    gpu::DeviceGuard guard(x.device());
    dispatch_floating(x.dtype(), "avg_pool2d", [&]<typename T>() {
      gpu::launch_avg_pool2d_forward<T>(g, xc.data<T>(), out.data<T>(), gpu::current_stream(x.device()));
    });
  } else
#endif
  dispatch_floating(x.dtype(), "avg_pool2d", [&]<typename T>() {
    cpu::avg_pool2d_forward<T>(g, xc.data<T>(), out.data<T>());
  });
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
