// Unary math and activations. Each op is a forward functor and a backward functor of (grad, saved),
// where `saved` is the input or the output, whichever the derivative is cheaper in. The functors call
// the formulas of ops/pointwise_math.h with the CPU's math policy (cpu::VecMath); the op codes beside
// them name the same formulas for CUDA tensors. Under create_graph the backward is the same formula
// written with differentiable ops (a saved output then carries the history of the op itself).
#include <type_traits>

#include "framework/autograd.h"
#include "ops/autocast.h"
#include "ops/cpu/vec_math.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/gelu_cpu.h"
#include "ops/elementwise/typed_entries.h"
#include "ops/elementwise/unary_entry.h"
#include "ops/pointwise_math.h"

namespace mantissa {
namespace {

using unary_entry::Saves;
using unary_entry::unary;

Tensor zero_like_scalar(const Tensor& t) { return full({}, 0.0, {.dtype = t.dtype(), .device = t.device()}); }

}  // namespace

Tensor exp(const Tensor& x) {
  // VecMath::exp: a vectorizing exp for float (within 2 ulp of std::exp), std::exp for double.
  return unary(
      x, ops::exp, "ExpBackward", Saves::kOutput, [](auto v) { return pointwise::exp<cpu::VecMath>(v); },
      [](auto g, auto r) { return pointwise::exp_backward(g, r); }, gpu::UnaryOp::kExp, gpu::BinaryOp::kMulBackward,
      [](const Tensor& g, const Tensor& r) { return mul(g, r); });
}

Tensor log(const Tensor& x) {
  return unary(
      x, ops::log, "LogBackward", Saves::kInput, [](auto v) { return pointwise::log<cpu::VecMath>(v); },
      [](auto g, auto v) { return pointwise::log_backward(g, v); }, gpu::UnaryOp::kLog, gpu::BinaryOp::kLogBackward,
      [](const Tensor& g, const Tensor& v) { return div(g, v); });
}

Tensor sqrt(const Tensor& x) {
  return unary(
      x, ops::sqrt, "SqrtBackward", Saves::kOutput, [](auto v) { return pointwise::sqrt(v); },
      [](auto g, auto r) { return pointwise::sqrt_backward(g, r); }, gpu::UnaryOp::kSqrt, gpu::BinaryOp::kSqrtBackward,
      [](const Tensor& g, const Tensor& r) { return div(g, add(r, r)); });
}

Tensor rsqrt(const Tensor& x) {
  return unary(
      x, ops::rsqrt, "RsqrtBackward", Saves::kOutput, [](auto v) { return pointwise::rsqrt(v); },
      [](auto g, auto r) { return pointwise::rsqrt_backward(g, r); }, gpu::UnaryOp::kRsqrt,
      gpu::BinaryOp::kRsqrtBackward, [](const Tensor& g, const Tensor& r) { return mul(g, mul(r, mul(r, r))) * -0.5; });
}

Tensor abs(const Tensor& x) {
  return unary(
      x, ops::abs, "AbsBackward", Saves::kInput, [](auto v) { return pointwise::abs(v); },
      [](auto g, auto v) { return pointwise::abs_backward(g, v); }, gpu::UnaryOp::kAbs, gpu::BinaryOp::kAbsBackward,
      [](const Tensor& g, const Tensor& v) {
        const Tensor zero = zero_like_scalar(g);
        return where(gt(v, 0.0), g, where(lt(v, 0.0), neg(g), zero));
      });
}

Tensor relu(const Tensor& x) {
  // NaN passes through, as in PyTorch (a NaN activation must reach the loss and the scaler).
  return unary(
      x, ops::relu, "ReluBackward", Saves::kOutput, [](auto v) { return pointwise::relu(v); },
      [](auto g, auto r) { return pointwise::relu_backward(g, r); }, gpu::UnaryOp::kRelu, gpu::BinaryOp::kReluBackward,
      [](const Tensor& g, const Tensor& r) { return where(gt(r, 0.0), g, zero_like_scalar(g)); });
}

namespace {

// GELU, erf form: x * Phi(x), Phi the standard normal CDF. erf and exp are the vectorizable float ones
// for f32/f16/bf16 (cpu::VecMath, within 2 ulp of libm), libm's for f64. Contiguous CPU f32/f16/bf16
// operands take the block kernels of ops/elementwise/gelu_cpu.h; others (f64, strided) the elementwise maps, with
// the same per-element formulas (pointwise::gelu and gelu_backward).
bool gelu_kernel_applies(const Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() && t.dtype() != DType::kF64;
}

// dx = g gelu'(x), as a differentiable op: the fast kernels compute it, and under create_graph its node
// differentiates it again (in g it is the same op; in x it is g gelu''(x)).
Tensor gelu_erf_backward(const Tensor& g, const Tensor& x);

// gelu''(x) = phi(x) (2 - x^2), phi the standard normal density; composed of differentiable ops.
struct GeluErfBackwardBackward final : Node {
  SavedTensor grad{this, "grad"};
  SavedTensor self{this, "self"};
  std::string_view name() const override { return "GeluBackwardBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& gg) override {
    const Tensor &g = grad.get(), &x = self.get();
    Tensor d_grad, d_self;
    if (next_edges[0].valid()) d_grad = gelu_erf_backward(gg[0], x);
    if (next_edges[1].valid()) {
      const Tensor x2 = mul(x, x);
      const Tensor phi = mul(exp(mul(x2, -0.5)), pointwise::kInvSqrt2Pi);
      d_self = mul(mul(gg[0], g), mul(phi, 2.0 - x2));
    }
    return {d_grad, d_self};
  }
};

Tensor gelu_erf_backward(const Tensor& g, const Tensor& x) {
  Tensor dx;
  if (gelu_kernel_applies(x) && gelu_kernel_applies(g) && g.dtype() == x.dtype() && g.shape() == x.shape()) {
    dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    profiler::RecordScope scope("gelu_backward");  // the block kernel, one profiler event
    if (scope.active()) detail::note_operands(scope, {&g, &x, &dx});
    dispatch_floating(x.dtype(), "gelu_backward", [&]<typename T>() {
      if constexpr (!std::is_same_v<T, double>) {
        cpu::gelu_erf_backward<T>(g.data<T>(), x.data<T>(), dx.data<T>(), x.numel());
      }
    });
  } else {
    dx = map_binary(g, x, "GeluBackward", [](auto gv, auto v) { return pointwise::gelu_backward<cpu::VecMath>(gv, v); },
                    {gpu::BinaryOp::kGeluBackward});
  }
  if (compute_requires_grad({&g, &x})) {
    auto node = make_node<GeluErfBackwardBackward>({&g, &x});
    node->grad = g;
    node->self = x;
    set_history(dx, node);
  }
  return dx;
}

struct GeluErfBackward final : Node {
  SavedTensor self{this, "self"};
  std::string_view name() const override { return "GeluBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {gelu_erf_backward(g[0], self.get())}; }
};

// The tanh form's derivative with differentiable ops: 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2),
// t = tanh(beta (x + kappa x^3)).
Tensor gelu_tanh_graph_backward(const Tensor& g, const Tensor& x) {
  const double beta = pointwise::kSqrt2OverPi, kappa = pointwise::kGeluTanhKappa;
  const Tensor x2 = mul(x, x);
  const Tensor t = tanh(mul(x + mul(x2, x) * kappa, beta));
  const Tensor dinner = (mul(x2, 3.0 * kappa) + 1.0) * beta;
  return g * ((t + 1.0) * 0.5 + mul(x, 1.0 - t * t) * dinner * 0.5);
}

Tensor gelu_erf(const Tensor& x_in) {
  const Tensor x = amp::cast_input(ops::gelu, x_in);
  MT_CHECK(is_floating(x.dtype()), "gelu: expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out;
  if (gelu_kernel_applies(x)) {
    out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    profiler::RecordScope scope("gelu");  // the block kernel, one profiler event
    if (scope.active()) detail::note_operands(scope, {&x, &out});
    dispatch_floating(x.dtype(), "gelu", [&]<typename T>() {
      if constexpr (!std::is_same_v<T, double>) cpu::gelu_erf_forward<T>(x.data<T>(), out.data<T>(), x.numel());
    });
  } else {
    out = map_unary(x, "gelu", [](auto v) { return pointwise::gelu<cpu::VecMath>(v); }, {gpu::UnaryOp::kGelu});
  }
  if (compute_requires_grad({&x})) {
    auto node = make_node<GeluErfBackward>({&x});
    node->self = x;
    set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  if (approximate == GeluApproximation::kTanh) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return unary(
        x, ops::gelu, "GeluBackward", Saves::kInput, [](auto v) { return pointwise::gelu_tanh<cpu::VecMath>(v); },
        [](auto g, auto v) { return pointwise::gelu_tanh_backward<cpu::VecMath>(g, v); }, gpu::UnaryOp::kGeluTanh,
        gpu::BinaryOp::kGeluTanhBackward, &gelu_tanh_graph_backward);
  }
  return gelu_erf(x);
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApproximation approximate) {
  return approximate == GeluApproximation::kTanh ? gelu_tanh_graph_backward(grad, x) : gelu_erf_backward(grad, x);
}

Tensor tanh(const Tensor& x) {
  return unary(
      x, ops::tanh, "TanhBackward", Saves::kOutput, [](auto v) { return pointwise::tanh<cpu::VecMath>(v); },
      [](auto g, auto r) { return pointwise::tanh_backward<cpu::VecMath>(g, r); }, gpu::UnaryOp::kTanh,
      gpu::BinaryOp::kTanhBackward, [](const Tensor& g, const Tensor& r) { return g * (1.0 - r * r); });
}

Tensor sigmoid(const Tensor& x) {
  return unary(
      x, ops::sigmoid, "SigmoidBackward", Saves::kOutput, [](auto v) { return pointwise::sigmoid<cpu::VecMath>(v); },
      [](auto g, auto r) { return pointwise::sigmoid_backward(g, r); }, gpu::UnaryOp::kSigmoid,
      gpu::BinaryOp::kSigmoidBackward, [](const Tensor& g, const Tensor& r) { return g * (r * (1.0 - r)); });
}

}  // namespace mantissa
