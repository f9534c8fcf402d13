// Unary math and activations. Each op is a forward functor and a backward functor of (grad, saved),
// where `saved` is the input or the output, whichever the derivative is cheaper in. The functors call
// the formulas of ops/pointwise_math.h with the CPU's math policy (cpu::VecMath); the op codes beside
// them name the same formulas for CUDA tensors.
#include <type_traits>

#include "framework/autograd.h"
#include "ops/autocast.h"
#include "ops/cpu/gelu.h"
#include "ops/cpu/vec_math.h"
#include "ops/device_map.h"
#include "ops/elementwise.h"
#include "ops/pointwise_math.h"

namespace mantissa {
namespace {

enum class Saves { kInput, kOutput };

// Backward of y = f(x): dx = df(g, saved) elementwise. CUDA tensors run the op code instead of the
// functor; both evaluate the same formula of ops/pointwise_math.h.
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
Tensor unary(const Tensor& x_in, const OpInfo& op, const char* backward_name, Saves saves, F&& f, DF df,
             gpu::UnaryOp device_f, gpu::BinaryOp device_df) {
  const Tensor x = amp::cast_input(op, x_in);
  const std::string_view name = op.name;
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
  // VecMath::exp: a vectorizing exp for float (within 2 ulp of std::exp), std::exp for double.
  return unary(
      x, ops::exp, "ExpBackward", Saves::kOutput, [](auto v) { return pointwise::exp<cpu::VecMath>(v); },
      [](auto g, auto r) { return pointwise::exp_backward(g, r); }, gpu::UnaryOp::kExp, gpu::BinaryOp::kMulBackward);
}

Tensor log(const Tensor& x) {
  return unary(
      x, ops::log, "LogBackward", Saves::kInput, [](auto v) { return pointwise::log<cpu::VecMath>(v); },
      [](auto g, auto v) { return pointwise::log_backward(g, v); }, gpu::UnaryOp::kLog, gpu::BinaryOp::kLogBackward);
}

Tensor sqrt(const Tensor& x) {
  return unary(
      x, ops::sqrt, "SqrtBackward", Saves::kOutput, [](auto v) { return pointwise::sqrt(v); },
      [](auto g, auto r) { return pointwise::sqrt_backward(g, r); }, gpu::UnaryOp::kSqrt, gpu::BinaryOp::kSqrtBackward);
}

Tensor rsqrt(const Tensor& x) {
  return unary(
      x, ops::rsqrt, "RsqrtBackward", Saves::kOutput, [](auto v) { return pointwise::rsqrt(v); },
      [](auto g, auto r) { return pointwise::rsqrt_backward(g, r); }, gpu::UnaryOp::kRsqrt,
      gpu::BinaryOp::kRsqrtBackward);
}

Tensor abs(const Tensor& x) {
  return unary(
      x, ops::abs, "AbsBackward", Saves::kInput, [](auto v) { return pointwise::abs(v); },
      [](auto g, auto v) { return pointwise::abs_backward(g, v); }, gpu::UnaryOp::kAbs, gpu::BinaryOp::kAbsBackward);
}

Tensor relu(const Tensor& x) {
  // NaN passes through, as in PyTorch (a NaN activation must reach the loss and the scaler).
  return unary(
      x, ops::relu, "ReluBackward", Saves::kOutput, [](auto v) { return pointwise::relu(v); },
      [](auto g, auto r) { return pointwise::relu_backward(g, r); }, gpu::UnaryOp::kRelu, gpu::BinaryOp::kReluBackward);
}

namespace {

// GELU, erf form: x * Phi(x), Phi the standard normal CDF. erf and exp are the vectorizable float ones
// for f32/f16/bf16 (cpu::VecMath, within 2 ulp of libm), libm's for f64. Contiguous CPU f32/f16/bf16
// operands take the block kernels of ops/cpu/gelu.h; others (f64, strided) the elementwise maps, with
// the same per-element formulas (pointwise::gelu and gelu_backward).
bool gelu_kernel_applies(const Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() && t.dtype() != DType::kF64;
}

struct GeluErfBackward final : Node {
  SavedTensor self{this, "self"};
  std::string_view name() const override { return "GeluBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor& x = self.get();
    if (gelu_kernel_applies(x) && gelu_kernel_applies(g[0]) && g[0].dtype() == x.dtype() && g[0].shape() == x.shape()) {
      Tensor dx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
      dispatch_floating(x.dtype(), "gelu_backward", [&]<typename T>() {
        if constexpr (!std::is_same_v<T, double>) {
          cpu::gelu_erf_backward<T>(g[0].data<T>(), x.data<T>(), dx.data<T>(), x.numel());
        }
      });
      return {dx};
    }
    return {map_binary(g[0], x, "GeluBackward",
                       [](auto gv, auto v) { return pointwise::gelu_backward<cpu::VecMath>(gv, v); },
                       {gpu::BinaryOp::kGeluBackward})};
  }
};

Tensor gelu_erf(const Tensor& x_in) {
  const Tensor x = amp::cast_input(ops::gelu, x_in);
  MT_CHECK(is_floating(x.dtype()), "gelu: expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out;
  if (gelu_kernel_applies(x)) {
    out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
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
        gpu::BinaryOp::kGeluTanhBackward);
  }
  return gelu_erf(x);
}

Tensor tanh(const Tensor& x) {
  return unary(
      x, ops::tanh, "TanhBackward", Saves::kOutput, [](auto v) { return pointwise::tanh<cpu::VecMath>(v); },
      [](auto g, auto r) { return pointwise::tanh_backward<cpu::VecMath>(g, r); }, gpu::UnaryOp::kTanh,
      gpu::BinaryOp::kTanhBackward);
}

Tensor sigmoid(const Tensor& x) {
  return unary(
      x, ops::sigmoid, "SigmoidBackward", Saves::kOutput, [](auto v) { return pointwise::sigmoid<cpu::VecMath>(v); },
      [](auto g, auto r) { return pointwise::sigmoid_backward(g, r); }, gpu::UnaryOp::kSigmoid,
      gpu::BinaryOp::kSigmoidBackward);
}

}  // namespace mantissa
