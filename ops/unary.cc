// Unary math and activations. Each op is a forward functor and a backward functor of (grad, saved),
// where `saved` is the input or the output, whichever the derivative is cheaper in.
#include <cmath>
#include <numbers>
#include <type_traits>

#include "ops/autocast.h"
#include "framework/autograd.h"
#include "ops/elementwise.h"
#include "ops/device_map.h"
#include "ops/cpu/gelu.h"
#include "ops/cpu/vec_math.h"

namespace mantissa {
namespace {

enum class Saves { kInput, kOutput };

// Backward of y = f(x): dx = df(g, saved) elementwise. CUDA tensors run the op codes instead of the
// functors (ops/cuda/pointwise_math.h holds the same formulas).
template <typename DF>
struct UnaryBackward final : Node {
  SavedTensor saved;
  const char* op_name;
  DF df;
  gpu::BinaryOp device_df;  // df's op code for CUDA tensors
  UnaryBackward(const char* name, Saves what, DF f, gpu::BinaryOp device_f)
      : saved(this, what == Saves::kInput ? "self" : "result"), op_name(name), df(std::move(f)), device_df(device_f) {}
  std::string_view name() const override { return op_name; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    return {map_binary(g[0], saved.get(), op_name, df, {device_df})};
  }
};

template <typename F, typename DF>
Tensor unary(const Tensor& x_in, const char* name, const char* backward_name, Saves saves, F&& f, DF df,
             gpu::UnaryOp device_f, gpu::BinaryOp device_df) {
  const Tensor x = amp::cast_input(name, x_in);
  MT_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out = map_unary(x, name, f, {device_f});
  if (compute_requires_grad({&x})) {
    auto node = make_node<UnaryBackward<DF>>({&x}, backward_name, saves, std::move(df), device_df);
    node->saved = saves == Saves::kInput ? x : out;
    set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor exp(const Tensor& x) {
  // exp_compute: a vectorizing exp for float (within 2 ulp of std::exp), std::exp for double.
  return unary(x, "exp", "ExpBackward", Saves::kOutput, [](auto v) { return cpu::exp_compute(v); },
               [](auto g, auto r) { return g * r; },
               gpu::UnaryOp::kExp, gpu::BinaryOp::kMulBackward);
}

Tensor log(const Tensor& x) {
  return unary(x, "log", "LogBackward", Saves::kInput, [](auto v) { return std::log(v); },
               [](auto g, auto v) { return g / v; },
               gpu::UnaryOp::kLog, gpu::BinaryOp::kLogBackward);
}

Tensor sqrt(const Tensor& x) {
  return unary(x, "sqrt", "SqrtBackward", Saves::kOutput, [](auto v) { return std::sqrt(v); },
               [](auto g, auto r) { return g / (r + r); },
               gpu::UnaryOp::kSqrt, gpu::BinaryOp::kSqrtBackward);
}

Tensor rsqrt(const Tensor& x) {
  return unary(x, "rsqrt", "RsqrtBackward", Saves::kOutput,
               [](auto v) { return decltype(v)(1) / std::sqrt(v); },
               [](auto g, auto r) { return decltype(g)(-0.5) * g * r * r * r; },
               gpu::UnaryOp::kRsqrt, gpu::BinaryOp::kRsqrtBackward);
}

Tensor abs(const Tensor& x) {
  return unary(x, "abs", "AbsBackward", Saves::kInput, [](auto v) { return std::abs(v); },
               [](auto g, auto v) {
                 using C = decltype(g);
                 return v > C(0) ? g : (v < C(0) ? -g : C(0));
               },
               gpu::UnaryOp::kAbs, gpu::BinaryOp::kAbsBackward);
}

Tensor relu(const Tensor& x) {
  return unary(x, "relu", "ReluBackward", Saves::kOutput,
               // NaN passes through, as in PyTorch (a NaN activation must reach the loss and the scaler).
               [](auto v) { return (v > decltype(v)(0) || v != v) ? v : decltype(v)(0); },
               [](auto g, auto r) { return r > decltype(g)(0) ? g : decltype(g)(0); },
               gpu::UnaryOp::kRelu, gpu::BinaryOp::kReluBackward);
}

namespace {

// GELU, erf form: x * Phi(x), Phi the standard normal CDF. erf and exp are the vectorizable float ones
// for f32/f16/bf16 (ops/cpu/vec_math.h, within 2 ulp of libm), libm's for f64. Contiguous CPU f32/f16/bf16
// operands take the block kernels of ops/cpu/gelu.h; others (f64, strided) the elementwise maps, with
// the same per-element formulas.
bool gelu_kernel_applies(const Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() && t.dtype() != DType::kF64;
}

struct GeluErfBackward final : Node {
  SavedTensor self{this, "self"};
  std::string_view name() const override { return "GeluBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor& x = self.get();
    if (gelu_kernel_applies(x) && gelu_kernel_applies(g[0]) && g[0].dtype() == x.dtype() &&
        g[0].shape() == x.shape()) {
      Tensor dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
      dispatch_floating(x.dtype(), "gelu_backward", [&]<typename T>() {
        if constexpr (!std::is_same_v<T, double>) {
          cpu::gelu_erf_backward<T>(g[0].data<T>(), x.data<T>(), dx.data<T>(), x.numel());
        }
      });
      return {dx};
    }
    return {map_binary(g[0], x, "GeluBackward", [](auto gv, auto v) { return cpu::gelu_erf_grad(gv, v); },
                       {gpu::BinaryOp::kGeluBackward})};
  }
};

Tensor gelu_erf(const Tensor& x_in) {
  const Tensor x = amp::cast_input("gelu", x_in);
  MT_CHECK(is_floating(x.dtype()), "gelu: expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out;
  if (gelu_kernel_applies(x)) {
    out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    dispatch_floating(x.dtype(), "gelu", [&]<typename T>() {
      if constexpr (!std::is_same_v<T, double>) cpu::gelu_erf_forward<T>(x.data<T>(), out.data<T>(), x.numel());
    });
  } else {
    out = map_unary(x, "gelu", [](auto v) { return cpu::gelu_erf_value(v); }, {gpu::UnaryOp::kGelu});
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
        x, "gelu", "GeluBackward", Saves::kInput,
        [](auto v) {
          using C = decltype(v);
          const C beta = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi), kappa = C(0.044715);
          return C(0.5) * v * (C(1) + std::tanh(beta * (v + kappa * v * v * v)));
        },
        [](auto g, auto v) {
          using C = decltype(g);
          const C beta = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi), kappa = C(0.044715);
          const C t = std::tanh(beta * (v + kappa * v * v * v));
          const C dinner = beta * (C(1) + C(3) * kappa * v * v);
          return g * (C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * dinner);
        },
               gpu::UnaryOp::kGeluTanh, gpu::BinaryOp::kGeluTanhBackward);
  }
  return gelu_erf(x);
}

Tensor tanh(const Tensor& x) {
  return unary(x, "tanh", "TanhBackward", Saves::kOutput, [](auto v) { return std::tanh(v); },
               [](auto g, auto r) { return g * (decltype(g)(1) - r * r); },
               gpu::UnaryOp::kTanh, gpu::BinaryOp::kTanhBackward);
}

Tensor sigmoid(const Tensor& x) {
  return unary(x, "sigmoid", "SigmoidBackward", Saves::kOutput,
               [](auto v) {
                 using C = decltype(v);
                 return C(1) / (C(1) + cpu::exp_compute(-v));
               },
               [](auto g, auto r) { return g * r * (decltype(g)(1) - r); },
               gpu::UnaryOp::kSigmoid, gpu::BinaryOp::kSigmoidBackward);
}

}  // namespace mantissa
