// layer_norm and batch_norm: argument checks, parameter widening, running-statistics updates, and the
// backward nodes. The fused kernels are in ops/norm/norm_cpu.cc; tests/ops/norm_test.cc checks them
// against the same formulas composed from elementwise and reduce ops. CUDA tensors go to
// ops/norm/norm_cuda.h (ops/norm/layer_norm.cu and ops/norm/batch_norm.cu).
#include "ops/norm/norm.h"

#include <cmath>
#include <vector>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "framework/profiler/profiler.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm_cpu.h"
#include "ops/norm/norm_cuda.h"
#include "ops/norm/norm_tensors.h"
#include "ops/pool/pool.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

using norm_tensors::compute_dtype;
using norm_tensors::ptr_or_null;
using norm_tensors::widened;

// A [size]-shaped per-feature argument: its shape, and its dtype either x's or f32 (the mixed case).
void check_param(const Tensor& p, const Shape& expected, const Tensor& x, std::string_view op, std::string_view arg) {
  if (!p.defined()) return;
  MT_CHECK(p.shape() == expected, op, ": ", arg, " must be ", shape_str(expected), " for input ", shape_str(x.shape()),
           ", got ", shape_str(p.shape()));
  MT_CHECK(p.dtype() == x.dtype() || (is_low_precision(x.dtype()) && p.dtype() == DType::kF32), op, ": ", arg, " is ",
           dtype_name(p.dtype()), " but input is ", dtype_name(x.dtype()),
           ". HINT: use the input's dtype (or f32 parameters with f16/bf16 input)");
  MT_CHECK(p.device() == x.device(), op, ": ", arg, " is on ", p.device().str(), " but input is on ", x.device().str());
}

// A parameter's gradient computed in the compute dtype, returned in the parameter's shape and dtype.
Tensor param_grad(const Tensor& g, const Shape& shape, DType dtype) { return g.to(dtype).reshape(shape); }

// A norm node's gradient buffers for its inputs (x, weight, bias), each only where that input wants one: dx
// in x's dtype, dw and db flat ([count]) in the compute dtype, as the kernels write them. grads() hands them
// back with dw and db in their parameters' dtypes and shape.
struct NormGrads {
  Tensor dx, dw, db;
  NormGrads(const Node& node, const Tensor& x, int64_t count) {
    const TensorOptions params{.dtype = compute_dtype(x.dtype()), .device = x.device()};
    if (node.next_edges[0].valid()) dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    if (node.next_edges[1].valid()) dw = empty({count}, params);
    if (node.next_edges[2].valid()) db = empty({count}, params);
  }
  std::vector<Tensor> grads(const Shape& param_shape, DType weight_dtype, DType bias_dtype) const {
    return {dx, dw.defined() ? param_grad(dw, param_shape, weight_dtype) : Tensor(),
            db.defined() ? param_grad(db, param_shape, bias_dtype) : Tensor()};
  }
};

// running = (1 - momentum) * running + momentum * batch, in place, computed in f64 and stored once.
void update_running(const Tensor& running, const std::vector<double>& batch, double momentum) {
  const Tensor old = widened(running, DType::kF64);
  std::vector<double> next(batch.size());
  for (size_t c = 0; c < batch.size(); ++c) next[c] = (1.0 - momentum) * old.data<double>()[c] + momentum * batch[c];
  NoGradGuard no_grad;
  copy_(running, from_vector<double>(next, running.shape()));
}

void cpu_layer_norm(const cpu::LayerNormGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                    const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  dispatch_floating(x.dtype(), "layer_norm", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::layer_norm_forward<T>(g, x.data<T>(), ptr_or_null<C>(w), ptr_or_null<C>(b), out.data<T>(), mean.data<C>(),
                               rstd.data<C>());
  });
}

void cpu_layer_norm_backward(const cpu::LayerNormGeometry& g, const Tensor& dy, const Tensor& x, const Tensor& mean,
                             const Tensor& rstd, const Tensor& w, const Tensor& dx, const Tensor& dw,
                             const Tensor& db) {
  dispatch_floating(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::layer_norm_backward<T>(g, dy.data<T>(), x.data<T>(), mean.data<C>(), rstd.data<C>(), ptr_or_null<C>(w),
                                ptr_or_null<T>(dx), ptr_or_null<C>(dw), ptr_or_null<C>(db));
  });
}

// batch_norm's statistics on the CPU: batch mean/invstd (f64 from the kernel's per-channel sums) and the
// running update (kTrain), or mean/invstd from the running statistics (kEval).
void cpu_batch_norm_stats(const Tensor& xc, const cpu::BatchNormGeometry& g, BatchNormMode mode,
                          const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                          const Tensor& mean, const Tensor& invstd) {
  const int64_t channels = g.channels;
  const Shape param_shape{channels};
  if (mode == BatchNormMode::kTrain) {
    Tensor var = empty(param_shape, {.dtype = compute_dtype(xc.dtype())});
    dispatch_floating(xc.dtype(), "batch_norm", [&]<typename T>() {
      using C = compute_t<T>;
      cpu::batch_norm_stats<T>(g, xc.data<T>(), mean.data<C>(), var.data<C>());
    });
    const Tensor mean64 = mean.to(DType::kF64), var64 = var.to(DType::kF64);
    std::vector<double> batch_mean(static_cast<size_t>(channels)), unbiased(batch_mean.size()), inv(batch_mean.size());
    const double bessel = static_cast<double>(g.count()) / static_cast<double>(g.count() - 1);
    for (int64_t c = 0; c < channels; ++c) {
      batch_mean[c] = mean64.data<double>()[c];
      unbiased[c] = var64.data<double>()[c] * bessel;
      inv[c] = 1.0 / std::sqrt(var64.data<double>()[c] + eps);
    }
    copy_(invstd, from_vector<double>(inv, param_shape));
    if (running_mean.defined()) {
      update_running(running_mean, batch_mean, momentum);
      update_running(running_var, unbiased, momentum);
    }
  } else {
    copy_(mean, running_mean.detach());
    const Tensor rv = widened(running_var, DType::kF64);
    std::vector<double> inv(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) inv[c] = 1.0 / std::sqrt(rv.data<double>()[c] + eps);
    copy_(invstd, from_vector<double>(inv, param_shape));
  }
}

void cpu_batch_norm_apply(const cpu::BatchNormGeometry& g, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          const Tensor& w, const Tensor& b, const Tensor& out) {
  dispatch_floating(x.dtype(), "batch_norm", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::batch_norm_apply<T>(g, x.data<T>(), mean.data<C>(), invstd.data<C>(), ptr_or_null<C>(w), ptr_or_null<C>(b),
                             out.data<T>());
  });
}

void cpu_batch_norm_backward(const cpu::BatchNormGeometry& g, cpu::BatchStats stats, const Tensor& dy, const Tensor& x,
                             const Tensor& mean, const Tensor& invstd, const Tensor& w, const Tensor& dx,
                             const Tensor& dw, const Tensor& db) {
  dispatch_floating(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::batch_norm_backward<T>(g, stats, dy.data<T>(), x.data<T>(), mean.data<C>(), invstd.data<C>(),
                                ptr_or_null<C>(w), ptr_or_null<T>(dx), ptr_or_null<C>(dw), ptr_or_null<C>(db));
  });
}

constexpr DeviceKernels<decltype(cpu_layer_norm)> kLayerNorm{.cpu = &cpu_layer_norm,
                                                             .cuda = MT_CUDA_KERNEL(cuda_layer_norm)};
constexpr DeviceKernels<decltype(cpu_layer_norm_backward)> kLayerNormBackward{
    .cpu = &cpu_layer_norm_backward, .cuda = MT_CUDA_KERNEL(cuda_layer_norm_backward)};
constexpr DeviceKernels<decltype(cpu_batch_norm_stats)> kBatchNormStats{.cpu = &cpu_batch_norm_stats,
                                                                        .cuda = MT_CUDA_KERNEL(cuda_batch_norm_stats)};
constexpr DeviceKernels<decltype(cpu_batch_norm_apply)> kBatchNormApply{.cpu = &cpu_batch_norm_apply,
                                                                        .cuda = MT_CUDA_KERNEL(cuda_batch_norm_apply)};
constexpr DeviceKernels<decltype(cpu_batch_norm_backward)> kBatchNormBackward{
    .cpu = &cpu_batch_norm_backward, .cuda = MT_CUDA_KERNEL(cuda_batch_norm_backward)};

// Both nodes keep the widened weight for their kernels and, when it requires grad, the weight itself: under
// create_graph the gradients are computed again with differentiable ops from x (the saved statistics have no
// history; their dependence on x is part of the second derivative) and that weight.
Tensor graph_weight(const Tensor& param, const SavedTensor& widened_weight, DType cd) {
  if (param.defined()) return param.to(cd);
  return widened_weight.defined() ? widened_weight.get() : Tensor();
}

struct LayerNormBackward final : Node {
  SavedTensor input{this, "input"};                // contiguous x
  SavedTensor weight{this, "weight"};              // widened to the compute dtype, when given
  SavedTensor weight_param{this, "weight_param"};  // the weight as given, when it requires grad
  SavedTensor mean{this, "mean"};                  // [rows], compute dtype
  SavedTensor rstd{this, "rstd"};
  cpu::LayerNormGeometry geometry;
  Shape normalized_shape;
  DType weight_dtype = DType::kF32, bias_dtype = DType::kF32;
  std::string_view name() const override { return "LayerNormBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = input.get();
    const DType cd = compute_dtype(x.dtype());
    const Tensor& w_param = weight_param.get();
    if (compute_requires_grad({&grads[0], &x, &w_param})) {
      return graph_backward(grads[0], x, graph_weight(w_param, weight, cd));
    }
    const Tensor dy = grads[0].contiguous();
    const NormGrads g(*this, x, geometry.cols);
    const Tensor w = weight.defined() ? weight.get() : Tensor();
    dispatch(name(), kLayerNormBackward, x.device(), geometry, dy, x, mean.get(), rstd.get(), w, g.dx, g.dw, g.db);
    return g.grads(normalized_shape, weight_dtype, bias_dtype);
  }
  // The kernel's formulas over [rows, cols] with differentiable ops: xhat = (x - mean) rstd, g = dy w,
  // dx = rstd (g - mean(g) - xhat mean(g xhat)), dw = sum(dy xhat), db = sum(dy), means along a row.
  std::vector<Tensor> graph_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& w) const {
    const DType cd = compute_dtype(x_in.dtype());
    const Shape rows_cols{geometry.rows, geometry.cols};
    const Tensor x = x_in.to(cd).reshape(rows_cols), dy = dy_in.to(cd).reshape(rows_cols);
    const Tensor centered = x - mean_of(x, {1});
    const Tensor r = rsqrt(mean_of(centered * centered, {1}) + geometry.eps);
    const Tensor xhat = centered * r;
    Tensor dx, dw, db;
    if (next_edges[0].valid()) {
      const Tensor g = w.defined() ? dy * w.reshape({1, geometry.cols}) : dy;
      dx = (r * (g - mean_of(g, {1}) - xhat * mean_of(g * xhat, {1}))).reshape(x_in.shape()).to(x_in.dtype());
    }
    if (next_edges[1].valid()) dw = param_grad(sum(dy * xhat, {0}), normalized_shape, weight_dtype);
    if (next_edges[2].valid()) db = param_grad(sum(dy, {0}), normalized_shape, bias_dtype);
    return {dx, dw, db};
  }
  static Tensor mean_of(const Tensor& t, const Shape& dims) { return mantissa::mean(t, dims, KeepDim::kYes); }
};

struct BatchNormBackward final : Node {
  SavedTensor input{this, "input"};                // contiguous x
  SavedTensor weight{this, "weight"};              // widened, when given
  SavedTensor weight_param{this, "weight_param"};  // the weight as given, when it requires grad
  SavedTensor mean{this, "mean"};                  // [C] statistics used to normalize, compute dtype
  SavedTensor invstd{this, "invstd"};
  cpu::BatchNormGeometry geometry;
  cpu::BatchStats stats = cpu::BatchStats::kFromBatch;
  double eps = 1e-5;
  Shape param_shape;
  DType weight_dtype = DType::kF32, bias_dtype = DType::kF32;
  std::string_view name() const override { return "BatchNormBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = input.get();
    const DType cd = compute_dtype(x.dtype());
    const Tensor& w_param = weight_param.get();
    if (compute_requires_grad({&grads[0], &x, &w_param})) {
      return graph_backward(grads[0], x, graph_weight(w_param, weight, cd));
    }
    const Tensor dy = grads[0].contiguous();
    const NormGrads g(*this, x, geometry.channels);
    const Tensor w = weight.defined() ? weight.get() : Tensor();
    dispatch(name(), kBatchNormBackward, x.device(), geometry, stats, dy, x, mean.get(), invstd.get(), w, g.dx, g.dw,
             g.db);
    return g.grads(param_shape, weight_dtype, bias_dtype);
  }
  // The kernel's formulas over [N, C, S] with differentiable ops, statistics per channel (dims 0 and 2):
  // with batch statistics as layer_norm's; with running ones (constants) dx = dy w invstd.
  std::vector<Tensor> graph_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& w) const {
    const DType cd = compute_dtype(x_in.dtype());
    const int64_t c = geometry.channels;
    const Shape ncs{geometry.n, c, geometry.spatial}, per_channel{1, c, 1};
    const Tensor x = x_in.to(cd).reshape(ncs), dy = dy_in.to(cd).reshape(ncs);
    const bool from_batch = stats == cpu::BatchStats::kFromBatch;
    Tensor centered, inv;
    if (from_batch) {
      centered = x - mean_of(x);
      inv = rsqrt(mean_of(centered * centered) + eps);
    } else {
      centered = x - mean.get().reshape(per_channel);
      inv = invstd.get().reshape(per_channel);
    }
    const Tensor xhat = centered * inv;
    Tensor dx, dw, db;
    if (next_edges[0].valid()) {
      const Tensor g = w.defined() ? dy * w.reshape(per_channel) : dy;
      dx = from_batch ? inv * (g - mean_of(g) - xhat * mean_of(g * xhat)) : g * inv;
      dx = dx.reshape(x_in.shape()).to(x_in.dtype());
    }
    if (next_edges[1].valid()) dw = param_grad(sum(dy * xhat, {0, 2}), param_shape, weight_dtype);
    if (next_edges[2].valid()) db = param_grad(sum(dy, {0, 2}), param_shape, bias_dtype);
    return {dx, dw, db};
  }
  static Tensor mean_of(const Tensor& t) { return mantissa::mean(t, {0, 2}, KeepDim::kYes); }
};

}  // namespace

namespace {

// layer_norm's checks of x, normalized_shape, weight and bias (naming `op`), and its parameters widened.
struct LayerNormPrep {
  cpu::LayerNormGeometry g;
  Tensor wc, bc;  // weight and bias in the compute dtype, when given
};

LayerNormPrep prepare_layer_norm(std::string_view op, const Tensor& x, const Shape& normalized_shape,
                                 const Tensor& weight, const Tensor& bias, double eps) {
  MT_CHECK(x.defined(), op, ": input is undefined");
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", dtype_name(x.dtype()));
  kernel_for(op, kLayerNorm, x.device());
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  MT_CHECK(k > 0 && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape, op,
           ": normalized_shape ", shape_str(normalized_shape), " must be non-empty and equal the last ",
           "dims of input ", shape_str(x.shape()), ". HINT: pass the trailing sizes, e.g. {",
           x.dim() > 0 ? x.size(-1) : 0, "} to normalize over the last dim");
  check_param(weight, normalized_shape, x, op, "weight");
  check_param(bias, normalized_shape, x, op, "bias");
  const int64_t cols = shape_numel(normalized_shape);
  MT_CHECK(cols > 0, op, ": normalized_shape ", shape_str(normalized_shape), " has no elements");
  const DType cd = compute_dtype(x.dtype());
  return {.g = {.rows = x.numel() / cols, .cols = cols, .eps = eps},
          .wc = weight.defined() ? widened(weight, cd) : Tensor(),
          .bc = bias.defined() ? widened(bias, cd) : Tensor()};
}

// layer_norm's history on `out`, normalized from xc (contiguous) with the statistics mean and rstd.
void record_layer_norm(Tensor& out, const Tensor& x, const Tensor& xc, const Tensor& weight, const Tensor& bias,
                       const LayerNormPrep& p, const Tensor& mean, const Tensor& rstd, const Shape& normalized_shape) {
  if (!compute_requires_grad({&x, &weight, &bias})) return;
  auto node = make_node<LayerNormBackward>({&x, &weight, &bias});
  node->input = xc;
  if (p.wc.defined()) node->weight = p.wc;
  if (weight.defined() && weight.requires_grad()) node->weight_param = weight;
  node->mean = mean;
  node->rstd = rstd;
  node->geometry = p.g;
  node->normalized_shape = normalized_shape;
  if (weight.defined()) node->weight_dtype = weight.dtype();
  if (bias.defined()) node->bias_dtype = bias.dtype();
  set_history(out, node);
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::layer_norm, {x_in, weight_in, bias_in});
  const Tensor &x = in[0], &weight = in[1], &bias = in[2];
  const LayerNormPrep p = prepare_layer_norm("layer_norm", x, normalized_shape, weight, bias, eps);
  const DType cd = compute_dtype(x.dtype());
  const Tensor xc = x.contiguous();
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  Tensor mean = empty({p.g.rows}, {.dtype = cd, .device = x.device()});
  Tensor rstd = empty({p.g.rows}, {.dtype = cd, .device = x.device()});
  dispatch("layer_norm", kLayerNorm, x.device(), p.g, xc, p.wc, p.bc, out, mean, rstd);
  record_layer_norm(out, x, xc, weight, bias, p, mean, rstd, normalized_shape);
  return out;
}

AddLayerNorm add_layer_norm(const Tensor& x_in, const Tensor& delta_in, const Shape& normalized_shape,
                            const Tensor& weight_in, const Tensor& bias_in, double eps) {
  constexpr std::string_view kOp = "add_layer_norm";
  // No casts of its own: layer_norm's autocast category is none on the CPU, and on CUDA the composed
  // layer_norm below casts (the sum keeps add's promoted dtype, as the two ops would).
  const Tensor &x = x_in, &delta = delta_in, &weight = weight_in, &bias = bias_in;
  MT_CHECK(x.defined() && delta.defined(), kOp, ": x and delta must be defined tensors");
  MT_CHECK(x.shape() == delta.shape(), kOp, ": x ", shape_str(x.shape()), " and delta ", shape_str(delta.shape()),
           " must have one shape. HINT: broadcast with add, then call layer_norm");
  const auto is_16 = [](DType d) { return d == DType::kF16 || d == DType::kBF16; };
  const bool fused = x.device().is_cpu() && delta.device() == x.device() && is_floating(x.dtype()) &&
                     (delta.dtype() == x.dtype() || (x.dtype() == DType::kF32 && is_16(delta.dtype())));
  if (!fused) {  // CUDA tensors, other dtype pairs (promoted by add): the two ops
    const Tensor sum = x + delta;
    return {sum, layer_norm(sum, normalized_shape, weight, bias, eps)};
  }
  const LayerNormPrep p = prepare_layer_norm(kOp, x, normalized_shape, weight, bias, eps);
  const DType cd = compute_dtype(x.dtype());
  const Tensor xc = x.contiguous(), dc = delta.contiguous();
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  Tensor sum = empty(x.shape(), like), out = empty(x.shape(), like);
  Tensor mean = empty({p.g.rows}, {.dtype = cd, .device = x.device()});
  Tensor rstd = empty({p.g.rows}, {.dtype = cd, .device = x.device()});
  {
    profiler::RecordScope scope(kOp, profiler::Category::kOp, x.device());
    if (scope.active()) {
      scope.add_input(xc);
      scope.add_input(dc);
    }
    dispatch_floating(x.dtype(), kOp, [&]<typename T>() {
      using C = compute_t<T>;
      const auto run = [&]<typename D>() {
        cpu::add_layer_norm_forward<T, D>(p.g, xc.data<T>(), dc.data<D>(), ptr_or_null<C>(p.wc), ptr_or_null<C>(p.bc),
                                          sum.data<T>(), out.data<T>(), mean.data<C>(), rstd.data<C>());
      };
      if (dc.dtype() == x.dtype()) {
        run.template operator()<T>();
      } else if constexpr (std::is_same_v<T, float>) {
        if (dc.dtype() == DType::kF16) run.template operator()<Half>();
        if (dc.dtype() == DType::kBF16) run.template operator()<BFloat16>();
      }
    });
  }
  record_add(sum, x, delta);
  record_layer_norm(out, sum, sum, weight, bias, p, mean, rstd, normalized_shape);
  return {sum, out};
}

Tensor group_norm(const Tensor& x_in, int64_t groups, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::group_norm, {x_in, weight_in, bias_in});
  const Tensor &x = in[0], &weight = in[1], &bias = in[2];
  MT_CHECK(x.defined(), "group_norm: input is undefined");
  MT_CHECK(x.dim() >= 2, "group_norm: input must be [N, C, *], got ", shape_str(x.shape()));
  MT_CHECK(is_floating(x.dtype()), "group_norm: expected a floating input, got ", dtype_name(x.dtype()));
  const int64_t n = x.size(0), channels = x.size(1);
  MT_CHECK(groups > 0 && channels % groups == 0, "group_norm: groups=", groups, " must be positive and divide the ",
           channels, " channels of input ", shape_str(x.shape()));
  check_param(weight, {channels}, x, "group_norm", "weight");
  check_param(bias, {channels}, x, "group_norm", "bias");
  // [N, C, *] -> [N, G, C/G * prod(*)]: each group is one layer_norm row. 16-bit inputs are widened so
  // the normalization and the affine step round once, at the end.
  const DType cd = compute_dtype(x.dtype());
  const int64_t per_group = n == 0 ? 0 : x.numel() / (n * groups);
  Tensor y =
      layer_norm(x.to(cd).reshape({n, groups, per_group}), {per_group}, Tensor(), Tensor(), eps).reshape(x.shape());
  Shape param_view(static_cast<size_t>(x.dim() - 1), 1);  // [C, 1, ...] broadcasts over [N, C, *]
  param_view[0] = channels;
  if (weight.defined()) y = mul(y, weight.to(cd).reshape(param_view));
  if (bias.defined()) y = add(y, bias.to(cd).reshape(param_view));
  return y.to(x.dtype());
}

namespace {

// What batch_norm and batch_norm_relu_pool2d share: the argument checks, the statistics (and the
// running update in train mode) and the widened parameters.
struct BatchNormPrep {
  cpu::BatchNormGeometry g;
  Shape param_shape;
  Tensor xc, mean, invstd, wc, bc;
};

BatchNormPrep prepare_batch_norm(std::string_view op, const Tensor& x, const Tensor& running_mean,
                                 const Tensor& running_var, const Tensor& weight, const Tensor& bias,
                                 BatchNormMode mode, double momentum, double eps) {
  MT_CHECK(x.defined(), op, ": input is undefined");
  MT_CHECK(x.dim() >= 2, op, ": input must be [N, C] or [N, C, H, W], got ", shape_str(x.shape()));
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating input, got ", dtype_name(x.dtype()));
  kernel_for(op, kBatchNormStats, x.device());
  const int64_t channels = x.size(1);
  BatchNormPrep p;
  p.param_shape = {channels};
  check_param(weight, p.param_shape, x, op, "weight");
  check_param(bias, p.param_shape, x, op, "bias");
  check_param(running_mean, p.param_shape, x, op, "running_mean");
  check_param(running_var, p.param_shape, x, op, "running_var");
  MT_CHECK(running_mean.defined() == running_var.defined(), op, ": give both running_mean and running_var, or neither");
  p.g = {.n = x.size(0),
         .channels = channels,
         .spatial = channels == 0 || x.size(0) == 0 ? 1 : x.numel() / (x.size(0) * channels)};
  const DType cd = compute_dtype(x.dtype());
  p.xc = x.contiguous();
  p.mean = empty(p.param_shape, {.dtype = cd, .device = x.device()});
  p.invstd = empty(p.param_shape, {.dtype = cd, .device = x.device()});
  MT_CHECK(mode == BatchNormMode::kEval || p.g.count() > 1, op, ": training needs more than one value per ",
           "channel, got input ", shape_str(x.shape()), ". HINT: use a batch larger than 1, or BatchNormMode::kEval");
  MT_CHECK(mode == BatchNormMode::kTrain || running_mean.defined(), op, ": eval mode needs running_mean and ",
           "running_var. HINT: pass the running statistics, or use BatchNormMode::kTrain");
  dispatch(op, kBatchNormStats, x.device(), p.xc, p.g, mode, running_mean, running_var, momentum, eps, p.mean,
           p.invstd);
  p.wc = weight.defined() ? widened(weight, cd) : Tensor();
  p.bc = bias.defined() ? widened(bias, cd) : Tensor();
  return p;
}

// The winners' tensor is a byte per output (kBool storage, never read as bool): window positions 0..3
// and cpu::kDeadWinner.
uint8_t* winner_bytes(const Tensor& winner) { return reinterpret_cast<uint8_t*>(winner.data<bool>()); }

void cpu_batch_norm_relu_pool(const cpu::BatchNormGeometry& g, int64_t h, int64_t w, const Tensor& x,
                              const Tensor& mean, const Tensor& invstd, const Tensor& wt, const Tensor& b,
                              const Tensor& out, const Tensor& winner, const Tensor& winner_x) {
  dispatch_floating(x.dtype(), "batch_norm_relu_pool2d", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::batch_norm_relu_pool_forward<T>(g, h, w, x.data<T>(), mean.data<C>(), invstd.data<C>(), ptr_or_null<C>(wt),
                                         ptr_or_null<C>(b), out.data<T>(), winner_bytes(winner), winner_x.data<T>());
  });
}

void cpu_batch_norm_relu_pool_backward(const cpu::BatchNormGeometry& g, cpu::BatchStats stats, int64_t h, int64_t w,
                                       const Tensor& dout, const Tensor& winner, const Tensor& winner_x,
                                       const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& wt,
                                       const Tensor& dx, const Tensor& dw, const Tensor& db) {
  dispatch_floating(x.dtype(), "BatchNormReluPoolBackward", [&]<typename T>() {
    using C = compute_t<T>;
    cpu::batch_norm_relu_pool_backward<T>(g, stats, h, w, dout.data<T>(), winner_bytes(winner), winner_x.data<T>(),
                                          x.data<T>(), mean.data<C>(), invstd.data<C>(), ptr_or_null<C>(wt),
                                          ptr_or_null<T>(dx), ptr_or_null<C>(dw), ptr_or_null<C>(db));
  });
}

// CPU only: on CUDA the op runs the three ops it fuses (no fused CUDA kernel is written yet).
constexpr DeviceKernels<decltype(cpu_batch_norm_relu_pool)> kBatchNormReluPool{.cpu = &cpu_batch_norm_relu_pool};
constexpr DeviceKernels<decltype(cpu_batch_norm_relu_pool_backward)> kBatchNormReluPoolBackward{
    .cpu = &cpu_batch_norm_relu_pool_backward};

struct BatchNormReluPoolBackward final : Node {
  SavedTensor input{this, "input"};    // contiguous x
  SavedTensor weight{this, "weight"};  // widened, when given
  SavedTensor mean{this, "mean"};
  SavedTensor invstd{this, "invstd"};
  SavedTensor winner{this, "winner"};      // one byte per output: the window position that won, or dead
  SavedTensor winner_x{this, "winner_x"};  // the input value that won, per output
  cpu::BatchNormGeometry geometry;
  cpu::BatchStats stats = cpu::BatchStats::kFromBatch;
  int64_t h = 0, w = 0;
  Shape param_shape;
  DType weight_dtype = DType::kF32, bias_dtype = DType::kF32;
  std::string_view name() const override { return "BatchNormReluPoolBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = input.get();
    const Tensor dout = grads[0].contiguous();
    const NormGrads g(*this, x, geometry.channels);
    const Tensor wt = weight.defined() ? weight.get() : Tensor();
    dispatch(name(), kBatchNormReluPoolBackward, x.device(), geometry, stats, h, w, dout, winner.get(), winner_x.get(),
             x, mean.get(), invstd.get(), wt, g.dx, g.dw, g.db);
    return g.grads(param_shape, weight_dtype, bias_dtype);
  }
};

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormMode mode, double momentum, double eps) {
  const BatchNormPrep p =
      prepare_batch_norm("batch_norm", x, running_mean, running_var, weight, bias, mode, momentum, eps);
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  dispatch("batch_norm", kBatchNormApply, x.device(), p.g, p.xc, p.mean, p.invstd, p.wc, p.bc, out);
  if (compute_requires_grad({&x, &weight, &bias})) {
    auto node = make_node<BatchNormBackward>({&x, &weight, &bias});
    node->input = p.xc;
    if (p.wc.defined()) node->weight = p.wc;
    if (weight.defined() && weight.requires_grad()) node->weight_param = weight;
    node->mean = p.mean;
    node->invstd = p.invstd;
    node->eps = eps;
    node->geometry = p.g;
    node->stats = mode == BatchNormMode::kTrain ? cpu::BatchStats::kFromBatch : cpu::BatchStats::kConstant;
    node->param_shape = p.param_shape;
    if (weight.defined()) node->weight_dtype = weight.dtype();
    if (bias.defined()) node->bias_dtype = bias.dtype();
    set_history(out, node);
  }
  return out;
}

Tensor batch_norm_relu_pool2d(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                              const Tensor& weight, const Tensor& bias, BatchNormMode mode, double momentum,
                              double eps) {
  constexpr std::string_view kOp = "batch_norm_relu_pool2d";
  MT_CHECK(x.defined() && x.dim() == 4, kOp, ": expected an input [N, C, H, W], got ",
           x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (!x.device().is_cpu()) {
    return relu(max_pool2d(batch_norm(x, running_mean, running_var, weight, bias, mode, momentum, eps),
                           {.kernel_size = {2, 2}}));
  }
  const BatchNormPrep p = prepare_batch_norm(kOp, x, running_mean, running_var, weight, bias, mode, momentum, eps);
  const int64_t h = x.size(2), w = x.size(3);
  Tensor out = empty({x.size(0), x.size(1), h / 2, w / 2}, {.dtype = x.dtype(), .device = x.device()});
  const Tensor winner = empty(out.shape(), {.dtype = DType::kBool, .device = x.device()});  // used as bytes
  const Tensor winner_x = empty(out.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) {
    dispatch(kOp, kBatchNormReluPool, x.device(), p.g, h, w, p.xc, p.mean, p.invstd, p.wc, p.bc, out, winner, winner_x);
  }
  if (compute_requires_grad({&x, &weight, &bias})) {
    auto node = make_node<BatchNormReluPoolBackward>({&x, &weight, &bias});
    node->input = p.xc;
    if (p.wc.defined()) node->weight = p.wc;
    node->mean = p.mean;
    node->invstd = p.invstd;
    node->winner = winner;
    node->winner_x = winner_x;
    node->geometry = p.g;
    node->stats = mode == BatchNormMode::kTrain ? cpu::BatchStats::kFromBatch : cpu::BatchStats::kConstant;
    node->h = h;
    node->w = w;
    node->param_shape = p.param_shape;
    if (weight.defined()) node->weight_dtype = weight.dtype();
    if (bias.defined()) node->bias_dtype = bias.dtype();
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa
