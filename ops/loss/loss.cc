// Typed entries and backward nodes for cross_entropy, nll_loss and mse_loss. The class-index losses
// share one plan (shape checks, target validation, [batch, classes, inner] geometry) and one way of
// turning the upstream gradient into a per-position scale.
#include "ops/loss/loss.h"

#include <vector>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/typed_entries.h"
#include "ops/loss/loss_cpu.h"
#include "ops/loss/loss_cuda.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"

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

using cpu::ClassLossForward;
using cpu::ClassLossSaved;
using cpu::ClassPlan;

// Checks (input, target) for a class-index loss named `op` and validates every target value (CPU tensors;
// on a GPU that would need a host synchronization, so the kernel turns a bad target into a NaN loss).
ClassPlan plan_class_loss(const Tensor& input, const Tensor& target, int64_t ignore_index, const char* op) {
  MT_CHECK(input.defined() && target.defined(), op, ": input and target must be defined tensors");
  MT_CHECK(is_floating(input.dtype()), op, ": expected a floating input (f32, f64, f16, bf16), got ",
           dtype_name(input.dtype()), " ", shape_str(input.shape()));
  MT_CHECK(target.dtype() == DType::kI64 || target.dtype() == DType::kI32, op,
           ": expected class-index targets of dtype i64, got ", dtype_name(target.dtype()), " ",
           shape_str(target.shape()),
           ". HINT: targets are class indices (not probabilities); convert with .to(kInt64)");
  MT_CHECK(input.device() == target.device(), op, ": no kernel for ", input.device().str(), " / ",
           target.device().str(), " in this build. HINT: put the input and the target on one device");
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
  if (!p.target.device().is_cpu()) return p;  // count stays 0; the kernels count on the device
  const int64_t* t = p.target.data<int64_t>();
  const int64_t classes = p.geometry.classes;
  for (int64_t i = 0; i < p.target.numel(); ++i) {
    if (t[i] == ignore_index) continue;
    MT_CHECK(t[i] >= 0 && t[i] < classes, op, ": target ", t[i], " (at flat position ", i, ") is out of range for ",
             classes, " classes; expected a class index in [0, ", classes - 1, "] or ignore_index ", ignore_index);
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

ClassLossForward cpu_cross_entropy(const ClassPlan& p, CrossEntropyOptions options) {
  const DType dtype = p.input.dtype();
  ClassLossForward r;
  dispatch_floating(dtype, "cross_entropy", [&]<typename T>() {
    using C = compute_t<T>;
    std::vector<C> loss(static_cast<size_t>(p.geometry.positions()));
    r.lse = empty({p.geometry.positions()}, {.dtype = dtype_v<C>});
    if (!loss.empty()) {
      cpu::cross_entropy_forward<T>(p.input.data<T>(), p.target.data<int64_t>(), p.geometry, options.ignore_index,
                                    loss.data(), r.lse.data<C>());
    }
    r.out = reduce_positions<C>(loss, p.loss_shape, dtype, options.reduction, p.count);
  });
  return r;
}

Tensor cpu_cross_entropy_backward(const Tensor& grad, const ClassLossSaved& s) {
  const Tensor& x = s.logits;
  Tensor dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  dispatch_floating(x.dtype(), "CrossEntropyBackward", [&]<typename T>() {
    using C = compute_t<T>;
    const auto scale = position_scale<C>(grad, s.options.reduction, s.count, s.geometry.positions());
    cpu::cross_entropy_backward<T>(x.data<T>(), s.target.data<int64_t>(), s.lse.data<C>(), scale.data(), s.geometry,
                                   s.options.ignore_index, dx.data<T>());
  });
  return dx;
}

ClassLossForward cpu_nll_loss(const ClassPlan& p, CrossEntropyOptions options) {
  const DType dtype = p.input.dtype();
  ClassLossForward r;
  dispatch_floating(dtype, "nll_loss", [&]<typename T>() {
    using C = compute_t<T>;
    std::vector<C> loss(static_cast<size_t>(p.geometry.positions()));
    if (!loss.empty()) {
      cpu::nll_forward<T>(p.input.data<T>(), p.target.data<int64_t>(), p.geometry, options.ignore_index, loss.data());
    }
    r.out = reduce_positions<C>(loss, p.loss_shape, dtype, options.reduction, p.count);
  });
  return r;
}

Tensor cpu_nll_loss_backward(const Tensor& grad, const ClassLossSaved& s) {
  Tensor dx = empty(s.input_shape, {.dtype = s.input_dtype});
  dispatch_floating(s.input_dtype, "NllLossBackward", [&]<typename T>() {
    using C = compute_t<T>;
    const auto scale = position_scale<C>(grad, s.options.reduction, s.count, s.geometry.positions());
    cpu::nll_backward<T>(s.target.data<int64_t>(), scale.data(), s.geometry, s.options.ignore_index, dx.data<T>());
  });
  return dx;
}

constexpr DeviceKernels<decltype(cpu_cross_entropy)> kCrossEntropy{.cpu = &cpu_cross_entropy,
                                                                   .cuda = MT_CUDA_KERNEL(cuda_cross_entropy)};
constexpr DeviceKernels<decltype(cpu_cross_entropy_backward)> kCrossEntropyBackward{
    .cpu = &cpu_cross_entropy_backward, .cuda = MT_CUDA_KERNEL(cuda_cross_entropy_backward)};
constexpr DeviceKernels<decltype(cpu_nll_loss)> kNllLoss{.cpu = &cpu_nll_loss, .cuda = MT_CUDA_KERNEL(cuda_nll_loss)};
constexpr DeviceKernels<decltype(cpu_nll_loss_backward)> kNllLossBackward{
    .cpu = &cpu_nll_loss_backward, .cuda = MT_CUDA_KERNEL(cuda_nll_loss_backward)};

// create_graph: the gradient of a class-index loss with differentiable ops, (probs - one_hot(target)) times
// the per-position scale (the upstream gradient, over count for kMean), zero where the target is
// ignore_index. `probs` is softmax(logits) for cross_entropy and undefined for nll_loss (whose gradient
// does not depend on its input). The history comes from probs and from the upstream gradient.
Tensor class_loss_graph_grad(const Tensor& grad, const ClassLossSaved& s, const Tensor& probs) {
  const Shape& input_shape = probs.defined() ? probs.shape() : s.input_shape;
  const DType dtype = probs.defined() ? probs.dtype() : s.input_dtype;
  const bool has_class_dim = input_shape.size() >= 2;  // [N, C, ...]; else [C] with a 0-d target
  const Tensor& target = s.target;
  const Tensor kept = ne(target, static_cast<double>(s.options.ignore_index));
  const Tensor classes = where(kept, target, full({}, 0.0, {.dtype = DType::kI64, .device = target.device()}));
  Tensor hot = one_hot(classes, input_shape[has_class_dim ? 1 : 0]).to(dtype);  // [N, d..., C]
  if (has_class_dim && hot.dim() > 2) {
    Shape perm{0, hot.dim() - 1};  // the class dim back to dim 1
    for (int64_t d = 1; d < hot.dim() - 1; ++d) perm.push_back(d);
    hot = hot.permute(perm);
  }
  Tensor scale = grad;  // per position for kNone, 0-d otherwise
  if (s.options.reduction == Reduction::kMean) {
    scale =
        s.device_count.defined() ? div(grad, s.device_count.to(grad.dtype())) : div(grad, static_cast<double>(s.count));
  }
  Tensor weight = mul(kept.to(dtype), scale);  // the position's scale, 0 where ignored
  if (has_class_dim) weight = weight.unsqueeze(1);
  return mul(probs.defined() ? sub(probs, hot) : neg(hot), weight);
}

// The count of non-ignored targets is a host integer for CPU targets and a device scalar (written by the
// CUDA forward) for device ones: the node keeps whichever its device's kernel reads.
struct CrossEntropyBackward final : Node {
  SavedTensor logits{this, "logits"};       // contiguous
  SavedTensor target{this, "target"};       // contiguous i64
  SavedTensor lse{this, "logsumexp"};       // [positions] in the compute type (f32 or f64)
  SavedTensor device_count{this, "count"};  // CUDA: f64 scalar on the device
  cpu::ClassGeometry geometry;
  CrossEntropyOptions options;
  int64_t count = 0;  // CPU
  std::string_view name() const override { return "CrossEntropyBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const ClassLossSaved s{.logits = logits.get(),
                           .target = target.get(),
                           .lse = lse.get(),
                           .device_count = device_count.defined() ? device_count.get() : Tensor(),
                           .count = count,
                           .geometry = geometry,
                           .options = options};
    if (compute_requires_grad({&grads[0], &s.logits})) {
      return {class_loss_graph_grad(grads[0], s, softmax(s.logits, s.logits.dim() >= 2 ? 1 : 0))};
    }
    return {dispatch(name(), kCrossEntropyBackward, s.logits.device(), grads[0], s)};
  }
};

struct NllLossBackward final : Node {
  SavedTensor target{this, "target"};       // contiguous i64
  SavedTensor device_count{this, "count"};  // CUDA: f64 scalar on the device
  Shape input_shape;
  DType input_dtype;
  cpu::ClassGeometry geometry;
  CrossEntropyOptions options;
  int64_t count = 0;  // CPU
  std::string_view name() const override { return "NllLossBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const ClassLossSaved s{.target = target.get(),
                           .device_count = device_count.defined() ? device_count.get() : Tensor(),
                           .count = count,
                           .input_shape = input_shape,
                           .input_dtype = input_dtype,
                           .geometry = geometry,
                           .options = options};
    if (compute_requires_grad({&grads[0]})) return {class_loss_graph_grad(grads[0], s, Tensor())};
    return {dispatch(name(), kNllLossBackward, s.target.device(), grads[0], s)};
  }
};

struct MseLossBackward final : Node {
  SavedTensor input{this, "self"};
  SavedTensor target{this, "target"};
  Reduction reduction;
  std::string_view name() const override { return "MseLossBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& a = input.get();
    const Tensor& b = target.get();
    // d/da (a - b)^2 = 2 (a - b), times the upstream grad (per element for kNone, a scalar otherwise)
    // and 1/numel for kMean; each gradient is computed in the compute type and rounded once.
    const double k = reduction == Reduction::kMean ? 2.0 / static_cast<double>(a.numel()) : 2.0;
    Tensor ga, gb;
    if (compute_requires_grad({&grads[0], &a, &b})) {  // create_graph: the same with differentiable ops
      if (next_edges[0].valid()) ga = mul(grads[0] * (a - b), k).to(a.dtype());
      if (next_edges[1].valid()) gb = mul(grads[0] * (b - a), k).to(b.dtype());
      return {ga, gb};
    }
    if (next_edges[0].valid()) {
      ga = map_ternary(grads[0], a, b, "mse_loss_backward",
                       [k](auto g, auto av, auto bv) {
                         return pointwise::scaled_diff_grad(static_cast<decltype(g)>(k), g, av, bv);
                       },
                       {gpu::TernaryOp::kScaledDiffGrad, k})
               .to(a.dtype());
    }
    if (next_edges[1].valid()) {
      gb = map_ternary(grads[0], b, a, "mse_loss_backward",
                       [k](auto g, auto bv, auto av) {
                         return pointwise::scaled_diff_grad(static_cast<decltype(g)>(k), g, bv, av);
                       },
                       {gpu::TernaryOp::kScaledDiffGrad, k})
               .to(b.dtype());
    }
    return {ga, gb};
  }
};

// mse_loss with kMean / kSum on the CPU: the squared differences summed in f64.
Tensor cpu_mse_reduced(const Tensor& input, const Tensor& target, Reduction reduction) {
  const DType dtype = promote_types(input.dtype(), target.dtype());
  const Tensor a = input.to(dtype).contiguous(), b = target.to(dtype).contiguous();
  double total = dispatch_floating(
      dtype, "mse_loss", [&]<typename T>() { return cpu::squared_error_sum<T>(a.data<T>(), b.data<T>(), a.numel()); });
  if (reduction == Reduction::kMean) total /= static_cast<double>(a.numel());  // empty: nan, as PyTorch
  return full({}, total, {.dtype = dtype});
}

// The same on a GPU, composed from device ops: the squared differences, then the device sum
// (accumulated in f32, f64 for f64).
Tensor device_mse_reduced(const Tensor& input, const Tensor& target, Reduction reduction) {
  const Tensor sq =
      map_binary(input.detach(), target.detach(), "mse_loss",
                 [](auto a, auto b) { return pointwise::squared_diff(a, b); }, {gpu::BinaryOp::kSquaredDiff});
  return reduction == Reduction::kMean ? mean(sq) : sum(sq);
}

// The device entry has no CUDA code of its own (its ops dispatch), so it needs no MT_CUDA_KERNEL.
constexpr DeviceKernels<decltype(cpu_mse_reduced)> kMseReduced{.cpu = &cpu_mse_reduced, .cuda = &device_mse_reduced};

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, CrossEntropyOptions options) {
  const Tensor logits = amp::cast_input(ops::cross_entropy, logits_in);
  ClassPlan p = plan_class_loss(logits, target, options.ignore_index, "cross_entropy");
  ClassLossForward r = dispatch("cross_entropy", kCrossEntropy, logits.device(), p, options);
  if (compute_requires_grad({&logits})) {
    auto node = make_node<CrossEntropyBackward>({&logits});
    node->logits = p.input;
    node->target = p.target;
    node->lse = r.lse;
    if (r.device_count.defined()) node->device_count = r.device_count;
    node->geometry = p.geometry;
    node->options = options;
    node->count = p.count;
    set_history(r.out, node);
  }
  return r.out;
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, CrossEntropyOptions options) {
  const Tensor log_probs = amp::cast_input(ops::nll_loss, log_probs_in);
  ClassPlan p = plan_class_loss(log_probs, target, options.ignore_index, "nll_loss");
  ClassLossForward r = dispatch("nll_loss", kNllLoss, log_probs.device(), p, options);
  if (compute_requires_grad({&log_probs})) {
    auto node = make_node<NllLossBackward>({&log_probs});
    node->target = p.target;
    if (r.device_count.defined()) node->device_count = r.device_count;
    node->input_shape = log_probs.shape();
    node->input_dtype = log_probs.dtype();
    node->geometry = p.geometry;
    node->options = options;
    node->count = p.count;
    set_history(r.out, node);
  }
  return r.out;
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::mse_loss, {input_in, target_in});
  const Tensor &input = in[0], &target = in[1];
  MT_CHECK(input.defined() && target.defined(), "mse_loss: input and target must be defined tensors");
  MT_CHECK(input.shape() == target.shape(), "mse_loss: input ", shape_str(input.shape()), " and target ",
           shape_str(target.shape()), " must have the same shape (reduction '", reduction_name(reduction),
           "'). HINT: reshape or expand the target explicitly; silent broadcasting in a loss hides bugs");
  MT_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), "mse_loss: expected floating tensors, got ",
           dtype_name(input.dtype()), " and ", dtype_name(target.dtype()));
  Tensor out;
  if (reduction == Reduction::kNone) {
    out = map_binary(input, target, "mse_loss", [](auto a, auto b) { return pointwise::squared_diff(a, b); },
                     {gpu::BinaryOp::kSquaredDiff});
  } else {
    out = dispatch("mse_loss", kMseReduced, input.device(), input, target, reduction);
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
