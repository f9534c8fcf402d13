// Typed entries and backward nodes for cross_entropy, nll_loss and mse_loss. The class-index losses
// share one plan (shape checks, target validation, [batch, classes, inner] geometry) and one way of
// turning the upstream gradient into a per-position scale.
#include "ops/autocast.h"
#include "ops/loss.h"

#include <vector>

#include "framework/autograd.h"
#include "ops/cpu/loss.h"
#include "ops/device_map.h"
#include "ops/reduce.h"

#ifdef MANTISSA_WITH_CUDA
#include "framework/cuda/stream.h"
#include "ops/cuda/index.h"
#include "ops/cuda/softmax.h"
#endif

namespace mantissa {
namespace {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::kNone: return "none";
    case Reduction::kMean: return "mean";
    case Reduction::kSum: return "sum";
  }
  return "?";
}

struct ClassPlan {
  Tensor input;   // contiguous
  Tensor target;  // contiguous i64
  Shape loss_shape;  // the per-position shape (kNone's output): target's shape
  cpu::ClassGeometry geometry;
  int64_t count = 0;  // positions whose target is not ignore_index
};

// Checks (input, target) for a class-index loss named `op` and validates every target value (CPU tensors;
// on a GPU that would need a host synchronization, so the kernel turns a bad target into a NaN loss).
ClassPlan plan_class_loss(const Tensor& input, const Tensor& target, int64_t ignore_index, const char* op,
                          bool allow_cuda = false) {
  MT_CHECK(input.defined() && target.defined(), op, ": input and target must be defined tensors");
  MT_CHECK(is_floating(input.dtype()), op, ": expected a floating input (f32, f64, f16, bf16), got ",
           dtype_name(input.dtype()), " ", shape_str(input.shape()));
  MT_CHECK(target.dtype() == DType::kI64 || target.dtype() == DType::kI32, op,
           ": expected class-index targets of dtype i64, got ", dtype_name(target.dtype()), " ",
           shape_str(target.shape()), ". HINT: targets are class indices (not probabilities); convert with .to(kInt64)");
  const bool cuda = allow_cuda && input.device().is_cuda() && target.device() == input.device();
  MT_CHECK((input.device().is_cpu() && target.device().is_cpu()) || cuda, op, ": no kernel for ",
           input.device().str(), " / ", target.device().str(), " in this build",
           input.device() != target.device() ? ". HINT: put the input and the target on one device" : "");
  MT_CHECK(input.dim() >= 1, op, ": expected input [N, C] or [N, C, d1, ...], got a 0-d tensor");
  Shape expected;  // the target shape the input implies
  ClassPlan p;
  if (input.dim() == 1) {
    p.geometry = {.batch = 1, .classes = input.size(0), .inner = 1};
  } else {
    expected.push_back(input.size(0));
    for (int64_t d = 2; d < input.dim(); ++d) {
      expected.push_back(input.size(d));
      p.geometry.inner *= input.size(d);
    }
    p.geometry.batch = input.size(0);
    p.geometry.classes = input.size(1);
  }
  MT_CHECK(target.shape() == expected, op, ": input ", shape_str(input.shape()), " needs a target of shape ",
           shape_str(expected), ", got ", shape_str(target.shape()),
           ". HINT: the class dim is dim 1 of the input and is absent from the target");
  p.input = input.contiguous();
  p.target = target.to(DType::kI64).contiguous();
  p.loss_shape = expected;
  if (cuda) return p;  // count stays 0; the kernels count on the device
  const int64_t* t = p.target.data<int64_t>();
  const int64_t classes = p.geometry.classes;
  for (int64_t i = 0; i < p.target.numel(); ++i) {
    if (t[i] == ignore_index) continue;
    MT_CHECK(t[i] >= 0 && t[i] < classes, op, ": target ", t[i], " (at flat position ", i,
             ") is out of range for ", classes, " classes; expected a class index in [0, ", classes - 1,
             "] or ignore_index ", ignore_index);
    ++p.count;
  }
  return p;
}

// The loss tensor from per-position values: as is (kNone) or summed in double, divided by `count` for kMean.
template <typename C>
Tensor reduce_positions(const std::vector<C>& loss, const Shape& shape, DType dtype, Reduction reduction,
                        int64_t count) {
  if (reduction == Reduction::kNone) {
    Tensor out = empty(shape, {.dtype = dtype});
    dispatch_floating(dtype, "loss", [&]<typename T>() {
      T* o = out.data<T>();
      for (size_t i = 0; i < loss.size(); ++i) o[i] = static_cast<T>(loss[i]);
    });
    return out;
  }
  double total = 0;
  for (C v : loss) total += static_cast<double>(v);
  if (reduction == Reduction::kMean) total /= static_cast<double>(count);  // 0/0 = nan, as PyTorch
  return full({}, total, {.dtype = dtype});
}

// Per-position gradient scale from the upstream grad of the loss: g[p] (kNone), g (kSum), g / count (kMean).
template <typename C>
std::vector<C> position_scale(const Tensor& grad, Reduction reduction, int64_t count, int64_t positions) {
  std::vector<C> scale(static_cast<size_t>(positions));
  if (reduction == Reduction::kNone) {
    const Tensor g = grad.to(dtype_v<C>).contiguous();
    const C* gp = g.data<C>();
    for (int64_t i = 0; i < positions; ++i) scale[static_cast<size_t>(i)] = gp[i];
    return scale;
  }
  double k = grad.item();
  if (reduction == Reduction::kMean) k /= static_cast<double>(count);
  std::fill(scale.begin(), scale.end(), static_cast<C>(k));
  return scale;
}

struct CrossEntropyBackward final : Node {
  SavedTensor logits{this, "logits"};  // contiguous
  SavedTensor target{this, "target"};  // contiguous i64
  SavedTensor lse{this, "logsumexp"};  // [positions] in the compute type (f32 or f64)
  cpu::ClassGeometry geometry;
  CrossEntropyOptions options;
  int64_t count = 0;
  std::string_view name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = logits.get();
    Tensor dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    dispatch_floating(x.dtype(), name(), [&]<typename T>() {
      using C = compute_t<T>;
      const auto scale = position_scale<C>(grads[0], options.reduction, count, geometry.positions());
      cpu::cross_entropy_backward<T>(x.data<T>(), target.get().data<int64_t>(), lse.get().data<C>(), scale.data(),
                                     geometry, options.ignore_index, dx.data<T>());
    });
    return {dx};
  }
};

#ifdef MANTISSA_WITH_CUDA
gpu::LossReduction device_reduction(Reduction r) {
  switch (r) {
    case Reduction::kNone: return gpu::LossReduction::kNone;
    case Reduction::kMean: return gpu::LossReduction::kMean;
    case Reduction::kSum: return gpu::LossReduction::kSum;
  }
  return gpu::LossReduction::kMean;
}
gpu::RowGeometry rows_of(const cpu::ClassGeometry& g) {
  return {.outer = g.batch, .dim = g.classes, .inner = g.inner};
}

// The CUDA cross-entropy's backward: the count of non-ignored targets stays on the device.
struct CudaCrossEntropyBackward final : Node {
  SavedTensor logits{this, "logits"};  // contiguous
  SavedTensor target{this, "target"};  // contiguous i64
  SavedTensor lse{this, "logsumexp"};  // [positions], compute dtype
  SavedTensor count{this, "count"};    // f64 scalar on the device
  cpu::ClassGeometry geometry;
  CrossEntropyOptions options;
  std::string_view name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& x = logits.get();
    const Tensor g = grads[0].to(x.dtype()).contiguous();
    Tensor dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    gpu::DeviceGuard guard(x.device());
    dispatch_floating(x.dtype(), name(), [&]<typename T>() {
      using C = compute_t<T>;
      gpu::launch_cross_entropy_backward<T, C>(rows_of(geometry), device_reduction(options.reduction), x.data<T>(),
                                               target.get().data<int64_t>(), lse.get().data<C>(), g.data<T>(),
                                               count.get().data<double>(), options.ignore_index, dx.data<T>(),
                                               gpu::current_stream(x.device()));
    });
    return {dx};
  }
};

// Fused log_softmax + nll on the GPU: per-position losses and logsumexps, then the reduction (mean over
// the non-ignored targets) on the device, with no host synchronization.
Tensor cuda_cross_entropy(const Tensor& logits, const ClassPlan& p, CrossEntropyOptions options) {
  const DType dtype = logits.dtype();
  const DType cd = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  const int64_t positions = p.geometry.positions();
  const Device device = logits.device();
  Tensor loss = empty({positions}, {.dtype = cd, .device = device});
  Tensor lse = empty({positions}, {.dtype = cd, .device = device});
  Tensor count = empty({}, {.dtype = DType::kF64, .device = device});
  Tensor out = empty(options.reduction == Reduction::kNone ? p.loss_shape : Shape{}, {.dtype = dtype, .device = device});
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  dispatch_floating(dtype, "cross_entropy", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_cross_entropy_forward<T, C>(rows_of(p.geometry), p.input.data<T>(), p.target.data<int64_t>(),
                                            options.ignore_index, loss.data<C>(), lse.data<C>(), stream);
    gpu::launch_loss_reduce<T, C>(positions, device_reduction(options.reduction), loss.data<C>(),
                                  p.target.data<int64_t>(), options.ignore_index, out.data<T>(), count.data<double>(),
                                  stream);
  });
  if (compute_requires_grad({&logits})) {
    auto node = make_node<CudaCrossEntropyBackward>({&logits});
    node->logits = p.input;
    node->target = p.target;
    node->lse = lse;
    node->count = count;
    node->geometry = p.geometry;
    node->options = options;
    set_history(out, node);
  }
  return out;
}

// nll_loss's backward on the GPU; as the cross-entropy, the count of non-ignored targets stays on the device.
struct CudaNllLossBackward final : Node {
  SavedTensor target{this, "target"};  // contiguous i64
  SavedTensor count{this, "count"};    // f64 scalar on the device (written for kMean / kSum)
  Shape input_shape;
  DType input_dtype;
  cpu::ClassGeometry geometry;
  CrossEntropyOptions options;
  std::string_view name() const override { return "NllLossBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor g = grads[0].to(input_dtype).contiguous();
    Tensor dx = empty(input_shape, {.dtype = input_dtype, .device = g.device()});
    gpu::DeviceGuard guard(g.device());
    dispatch_floating(input_dtype, name(), [&]<typename T>() {
      using C = compute_t<T>;
      gpu::launch_nll_backward<T, C>(target.get().data<int64_t>(), g.data<T>(), count.get().data<double>(),
                                     device_reduction(options.reduction), geometry.batch, geometry.classes,
                                     geometry.inner, options.ignore_index, dx.data<T>(),
                                     gpu::current_stream(g.device()));
    });
    return {dx};
  }
};

// nll_loss on the GPU: per-position losses, then the same device-side reduction as the cross-entropy.
Tensor cuda_nll_loss(const Tensor& log_probs, const ClassPlan& p, CrossEntropyOptions options) {
  const DType dtype = log_probs.dtype();
  const DType cd = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  const int64_t positions = p.geometry.positions();
  const Device device = log_probs.device();
  Tensor loss = empty({positions}, {.dtype = cd, .device = device});
  Tensor count = empty({}, {.dtype = DType::kF64, .device = device});
  Tensor out = empty(options.reduction == Reduction::kNone ? p.loss_shape : Shape{}, {.dtype = dtype, .device = device});
  gpu::DeviceGuard guard(device);
  const cudaStream_t stream = gpu::current_stream(device);
  dispatch_floating(dtype, "nll_loss", [&]<typename T>() {
    using C = compute_t<T>;
    gpu::launch_nll_forward<T, C>(p.input.data<T>(), p.target.data<int64_t>(), p.geometry.batch, p.geometry.classes,
                                  p.geometry.inner, options.ignore_index, loss.data<C>(), stream);
    gpu::launch_loss_reduce<T, C>(positions, device_reduction(options.reduction), loss.data<C>(),
                                  p.target.data<int64_t>(), options.ignore_index, out.data<T>(), count.data<double>(),
                                  stream);
  });
  if (compute_requires_grad({&log_probs})) {
    auto node = make_node<CudaNllLossBackward>({&log_probs});
    node->target = p.target;
    node->count = count;
    node->input_shape = log_probs.shape();
    node->input_dtype = dtype;
    node->geometry = p.geometry;
    node->options = options;
    set_history(out, node);
  }
  return out;
}
#endif

struct NllLossBackward final : Node {
  SavedTensor target{this, "target"};  // contiguous i64
  Shape input_shape;
  DType input_dtype;
  cpu::ClassGeometry geometry;
  CrossEntropyOptions options;
  int64_t count = 0;
  std::string_view name() const override { return "NllLossBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    Tensor dx = empty(input_shape, {.dtype = input_dtype});
    dispatch_floating(input_dtype, name(), [&]<typename T>() {
      using C = compute_t<T>;
      const auto scale = position_scale<C>(grads[0], options.reduction, count, geometry.positions());
      cpu::nll_backward<T>(target.get().data<int64_t>(), scale.data(), geometry, options.ignore_index, dx.data<T>());
    });
    return {dx};
  }
};

struct MseLossBackward final : Node {
  SavedTensor input{this, "self"};
  SavedTensor target{this, "target"};
  Reduction reduction;
  std::string_view name() const override { return "MseLossBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& a = input.get();
    const Tensor& b = target.get();
    // d/da (a - b)^2 = 2 (a - b), times the upstream grad (per element for kNone, a scalar otherwise)
    // and 1/numel for kMean; each gradient is computed in the compute type and rounded once.
    const double k = reduction == Reduction::kMean ? 2.0 / static_cast<double>(a.numel()) : 2.0;
    Tensor ga, gb;
    if (next_edges[0].valid()) {
      ga = map_ternary(
               grads[0], a, b, "mse_loss_backward",
               [k](auto g, auto av, auto bv) { return static_cast<decltype(g)>(k) * g * (av - bv); },
               {gpu::TernaryOp::kScaledDiffGrad, k})
               .to(a.dtype());
    }
    if (next_edges[1].valid()) {
      gb = map_ternary(
               grads[0], b, a, "mse_loss_backward",
               [k](auto g, auto bv, auto av) { return static_cast<decltype(g)>(k) * g * (bv - av); },
               {gpu::TernaryOp::kScaledDiffGrad, k})
               .to(b.dtype());
    }
    return {ga, gb};
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, CrossEntropyOptions options) {
  const Tensor logits = amp::cast_input("cross_entropy", logits_in);
  ClassPlan p = plan_class_loss(logits, target, options.ignore_index, "cross_entropy", /*allow_cuda=*/true);
#ifdef MANTISSA_WITH_CUDA
  if (logits.device().is_cuda()) return cuda_cross_entropy(logits, p, options);
#endif
  const DType dtype = logits.dtype();
  Tensor out, lse;
  dispatch_floating(dtype, "cross_entropy", [&]<typename T>() {
    using C = compute_t<T>;
    std::vector<C> loss(static_cast<size_t>(p.geometry.positions()));
    lse = empty({p.geometry.positions()}, {.dtype = dtype_v<C>});
    if (!loss.empty()) {
      cpu::cross_entropy_forward<T>(p.input.data<T>(), p.target.data<int64_t>(), p.geometry, options.ignore_index,
                                    loss.data(), lse.data<C>());
    }
    out = reduce_positions<C>(loss, p.loss_shape, dtype, options.reduction, p.count);
  });
  if (compute_requires_grad({&logits})) {
    auto node = make_node<CrossEntropyBackward>({&logits});
    node->logits = p.input;
    node->target = p.target;
    node->lse = lse;
    node->geometry = p.geometry;
    node->options = options;
    node->count = p.count;
    set_history(out, node);
  }
  return out;
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, CrossEntropyOptions options) {
  const Tensor log_probs = amp::cast_input("nll_loss", log_probs_in);
  ClassPlan p = plan_class_loss(log_probs, target, options.ignore_index, "nll_loss", /*allow_cuda=*/true);
#ifdef MANTISSA_WITH_CUDA
  if (log_probs.device().is_cuda()) return cuda_nll_loss(log_probs, p, options);
#endif
  const DType dtype = log_probs.dtype();
  Tensor out;
  dispatch_floating(dtype, "nll_loss", [&]<typename T>() {
    using C = compute_t<T>;
    std::vector<C> loss(static_cast<size_t>(p.geometry.positions()));
    if (!loss.empty()) {
      cpu::nll_forward<T>(p.input.data<T>(), p.target.data<int64_t>(), p.geometry, options.ignore_index, loss.data());
    }
    out = reduce_positions<C>(loss, p.loss_shape, dtype, options.reduction, p.count);
  });
  if (compute_requires_grad({&log_probs})) {
    auto node = make_node<NllLossBackward>({&log_probs});
    node->target = p.target;
    node->input_shape = log_probs.shape();
    node->input_dtype = dtype;
    node->geometry = p.geometry;
    node->options = options;
    node->count = p.count;
    set_history(out, node);
  }
  return out;
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const std::vector<Tensor> in = amp::cast_inputs("mse_loss", {input_in, target_in});
  const Tensor &input = in[0], &target = in[1];
  MT_CHECK(input.defined() && target.defined(), "mse_loss: input and target must be defined tensors");
  MT_CHECK(input.shape() == target.shape(), "mse_loss: input ", shape_str(input.shape()), " and target ",
           shape_str(target.shape()), " must have the same shape (reduction '", reduction_name(reduction),
           "'). HINT: reshape or expand the target explicitly; silent broadcasting in a loss hides bugs");
  MT_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), "mse_loss: expected floating tensors, got ",
           dtype_name(input.dtype()), " and ", dtype_name(target.dtype()));
  const DType dtype = promote_types(input.dtype(), target.dtype());
  Tensor out;
  if (reduction == Reduction::kNone) {
    out = map_binary(input, target, "mse_loss", [](auto a, auto b) { return (a - b) * (a - b); },
                     {gpu::BinaryOp::kSquaredDiff});
  } else if (input.device().is_cuda()) {
    // The squared differences, then the CUDA sum (accumulated in f32, f64 for f64; the CPU adds in f64).
    const Tensor sq = map_binary(input.detach(), target.detach(), "mse_loss",
                                 [](auto a, auto b) { return (a - b) * (a - b); }, {gpu::BinaryOp::kSquaredDiff});
    out = reduction == Reduction::kMean ? mean(sq) : sum(sq);
  } else {
    const Tensor a = input.to(dtype).contiguous(), b = target.to(dtype).contiguous();
    MT_CHECK(a.device().is_cpu(), "mse_loss: no kernel for ", a.device().str(), " in this build");
    double total = dispatch_floating(dtype, "mse_loss", [&]<typename T>() {
      return cpu::squared_error_sum<T>(a.data<T>(), b.data<T>(), a.numel());
    });
    if (reduction == Reduction::kMean) total /= static_cast<double>(a.numel());  // empty: nan, as PyTorch
    out = full({}, total, {.dtype = dtype});
  }
  if (compute_requires_grad({&input, &target})) {
    auto node = make_node<MseLossBackward>({&input, &target});
    node->input = input;
    node->target = target;
    node->reduction = reduction;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa
