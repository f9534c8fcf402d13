// Binary arithmetic with broadcasting, and its backward: the gradient of a broadcast input is summed
// back to the input's shape and returned in the input's dtype. The element formulas are those of
// ops/pointwise_math.h (pow's with the CPU's math policy, cpu::VecMath), named again by the op codes.
#include "ops/elementwise/elementwise.h"

#include <cmath>

#include "framework/autograd.h"
#include "ops/autocast.h"
#include "ops/cpu/vec_math.h"
#include "ops/elementwise/typed_entries.h"
#include "ops/pointwise_math.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

struct InputInfo {
  Shape shape;
  DType dtype;
};
InputInfo info(const Tensor& t) { return {t.shape(), t.dtype()}; }

// The gradient for an input of `in`'s shape and dtype from a gradient of the broadcast output.
Tensor reduce_grad(const Tensor& g, const InputInfo& in) { return sum_to(g, in.shape).to(in.dtype); }

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

struct BinaryBackward final : Node {
  BinaryOp op;
  InputInfo a_info, b_info;
  SavedTensor a{this, "self"};  // saved only for mul and div
  SavedTensor b{this, "other"};
  explicit BinaryBackward(BinaryOp o) : op(o) {}
  bool supports_create_graph() const override { return true; }
  std::string_view name() const override {
    switch (op) {
      case BinaryOp::kAdd: return "AddBackward";
      case BinaryOp::kSub: return "SubBackward";
      case BinaryOp::kMul: return "MulBackward";
      case BinaryOp::kDiv: return "DivBackward";
    }
    return "BinaryBackward";
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    const bool need_a = next_edges[0].valid(), need_b = next_edges[1].valid();
    const Tensor &av = a.get(), &bv = b.get();
    Tensor ga, gb;
    switch (op) {
      case BinaryOp::kAdd:
        if (need_a) ga = reduce_grad(g, a_info);
        if (need_b) gb = reduce_grad(g, b_info);
        break;
      case BinaryOp::kSub:
        if (need_a) ga = reduce_grad(g, a_info);
        if (need_b) gb = reduce_grad(neg(g), b_info);
        break;
      case BinaryOp::kMul:
        if (need_a) ga = reduce_grad(mul(g, bv), a_info);
        if (need_b) gb = reduce_grad(mul(g, av), b_info);
        break;
      case BinaryOp::kDiv:
        if (need_a) ga = reduce_grad(div(g, bv), a_info);
        if (need_b && compute_requires_grad({&g, &av, &bv})) {
          // create_graph: -g a / (b b) through differentiable ops (the fused formula below records nothing).
          gb = reduce_grad(neg(div(mul(g, av), mul(bv, bv))), b_info);
        } else if (need_b) {
          gb = reduce_grad(map_ternary(g, av, bv, "div_backward",
                                       [](auto gv, auto x, auto y) { return pointwise::div_backward_other(gv, x, y); },
                                       {gpu::TernaryOp::kDivBackwardOther}),
                           b_info);
        }
        break;
    }
    return {ga, gb};
  }
};

gpu::BinaryOp device_op(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return gpu::BinaryOp::kAdd;
    case BinaryOp::kSub: return gpu::BinaryOp::kSub;
    case BinaryOp::kMul: return gpu::BinaryOp::kMul;
    case BinaryOp::kDiv: return gpu::BinaryOp::kDiv;
  }
  return gpu::BinaryOp::kAdd;
}

template <typename F>
Tensor binary(const Tensor& a, const Tensor& b, BinaryOp op, std::string_view name, F&& f) {
  Tensor out = map_binary(a, b, name, f, {device_op(op)});
  if (compute_requires_grad({&a, &b})) {
    auto node = make_node<BinaryBackward>({&a, &b}, op);
    node->a_info = info(a);
    node->b_info = info(b);
    if (op == BinaryOp::kMul || op == BinaryOp::kDiv) {
      if (op == BinaryOp::kMul || b.requires_grad()) node->a = a;
      node->b = b;
    }
    set_history(out, node);
  }
  return out;
}

// Tensor-scalar ops: d out / d a = scale (add, sub: 1; mul: s; div: 1/s).
struct ScaleBackward final : Node {
  double scale = 1.0;
  std::string_view name() const override { return "ScalarOpBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {scale == 1.0 ? g[0] : mul(g[0], scale)}; }
};

template <typename F>
Tensor scalar_op(const Tensor& a, double scale, std::string_view name, F&& f, gpu::PointwiseOp<gpu::UnaryOp> code) {
  MT_CHECK(is_floating(a.dtype()), name, ": expected a floating tensor, got ", dtype_name(a.dtype()));
  Tensor out = map_unary(a, name, f, code);
  if (compute_requires_grad({&a})) {
    auto node = make_node<ScaleBackward>({&a});
    node->scale = scale;
    set_history(out, node);
  }
  return out;
}

struct PowBackward final : Node {
  SavedTensor self{this, "self"};
  SavedTensor exponent{this, "exponent"};
  SavedTensor result{this, "result"};
  InputInfo a_info, b_info;
  std::string_view name() const override { return "PowBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    const Tensor &x = self.get(), &e = exponent.get(), &r = result.get();
    if (compute_requires_grad({&g, &x, &e, &r})) return graph_backward(g, x, e, r);
    Tensor ga, gb;
    if (next_edges[0].valid()) {
      ga = reduce_grad(
          map_ternary(g, self.get(), exponent.get(), "pow_backward",
                      [](auto gv, auto x, auto e) { return pointwise::pow_backward_self<cpu::VecMath>(gv, x, e); },
                      {gpu::TernaryOp::kPowBackwardSelf}),
          a_info);
    }
    if (next_edges[1].valid()) {
      gb = reduce_grad(
          map_ternary(g, self.get(), result.get(), "pow_backward",
                      [](auto gv, auto x, auto r) { return pointwise::pow_backward_exponent<cpu::VecMath>(gv, x, r); },
                      {gpu::TernaryOp::kPowBackwardExp}),
          b_info);
    }
    return {ga, gb};
  }
  // The kernels' formulas with differentiable ops (create_graph); r, the saved output, carries this node
  // as its history. Where the kernels give 0 (e == 0 for x, x == 0 for e), the operand that could be
  // singular there is replaced too (x^(e - 1) by x^0, log(x) by log(1)): masking alone would leave an inf
  // whose product with the masked zero gradient is a NaN in the second derivative.
  std::vector<Tensor> graph_backward(const Tensor& g, const Tensor& x, const Tensor& e, const Tensor& r) const {
    Tensor ga, gb;
    if (next_edges[0].valid()) {
      const Tensor e_zero = eq(e, 0.0);
      const Tensor x_pow = pow(x, sub(masked_fill(e, e_zero, 1.0), 1.0));
      ga = reduce_grad(masked_fill(mul(g, mul(e, x_pow)), e_zero, 0.0), a_info);
    }
    if (next_edges[1].valid()) gb = reduce_grad(mul(g, mul(r, log(masked_fill(x, eq(x, 0.0), 1.0)))), b_info);
    return {ga, gb};
  }
};

struct PowScalarBackward final : Node {
  SavedTensor self{this, "self"};
  double exponent = 1.0;
  std::string_view name() const override { return "PowBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const double e = exponent;
    if (e == 0.0) return {zeros_like(g[0])};
    const Tensor& x = self.get();
    // create_graph: g e x^(e - 1) through differentiable ops.
    if (compute_requires_grad({&g[0], &x})) return {mul(g[0], mul(pow(x, e - 1.0), e))};
    return {map_binary(g[0], x, "pow_backward",
                       [e](auto gv, auto x) {
                         using C = decltype(gv);
                         return pointwise::pow_scalar_backward<cpu::VecMath>(gv, x, C(e), C(e - 1.0));
                       },
                       {gpu::BinaryOp::kPowScalarBackward, e, e - 1.0})};
  }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(a, b, BinaryOp::kAdd, "add", [](auto x, auto y) { return pointwise::add(x, y); });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(a, b, BinaryOp::kSub, "sub", [](auto x, auto y) { return pointwise::sub(x, y); });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(a, b, BinaryOp::kMul, "mul", [](auto x, auto y) { return pointwise::mul(x, y); });
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(a, b, BinaryOp::kDiv, "div", [](auto x, auto y) { return pointwise::div(x, y); });
}

void record_add(Tensor& sum, const Tensor& a, const Tensor& b) {
  if (!compute_requires_grad({&a, &b})) return;
  auto node = make_node<BinaryBackward>({&a, &b}, BinaryOp::kAdd);
  node->a_info = info(a);
  node->b_info = info(b);
  set_history(sum, node);
}

Tensor add(const Tensor& a, double s) {
  return scalar_op(a, 1.0, "add", [s](auto x) { return pointwise::add(x, static_cast<decltype(x)>(s)); },
                   {gpu::UnaryOp::kAddScalar, s});
}
Tensor sub(const Tensor& a, double s) {
  return scalar_op(a, 1.0, "sub", [s](auto x) { return pointwise::sub(x, static_cast<decltype(x)>(s)); },
                   {gpu::UnaryOp::kSubScalar, s});
}
Tensor mul(const Tensor& a, double s) {
  return scalar_op(a, s, "mul", [s](auto x) { return pointwise::mul(x, static_cast<decltype(x)>(s)); },
                   {gpu::UnaryOp::kMulScalar, s});
}
Tensor div(const Tensor& a, double s) {
  return scalar_op(a, 1.0 / s, "div", [s](auto x) { return pointwise::div(x, static_cast<decltype(x)>(s)); },
                   {gpu::UnaryOp::kDivScalar, s});
}
Tensor neg(const Tensor& a) {
  return scalar_op(a, -1.0, "neg", [](auto x) { return pointwise::neg(x); }, {gpu::UnaryOp::kNeg});
}

Tensor pow(const Tensor& a_in, const Tensor& exponent_in) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::pow, {a_in, exponent_in});
  const Tensor& a = in[0];
  const Tensor& exponent = in[1];
  Tensor out = map_binary(a, exponent, "pow", [](auto x, auto e) { return pointwise::pow<cpu::VecMath>(x, e); },
                          {gpu::BinaryOp::kPow});
  if (compute_requires_grad({&a, &exponent})) {
    auto node = make_node<PowBackward>({&a, &exponent});
    node->self = a;
    node->exponent = exponent;
    node->result = out;
    node->a_info = info(a);
    node->b_info = info(exponent);
    set_history(out, node);
  }
  return out;
}

Tensor pow(const Tensor& a_in, double e) {
  const Tensor a = amp::cast_input(ops::pow, a_in);
  MT_CHECK(is_floating(a.dtype()), "pow: expected a floating tensor, got ", dtype_name(a.dtype()));
  Tensor out =
      e == 2.0
          ? map_unary(a, "pow", [](auto x) { return pointwise::square(x); }, {gpu::UnaryOp::kSquare})
          : map_unary(a, "pow", [e](auto x) { return pointwise::pow<cpu::VecMath>(x, static_cast<decltype(x)>(e)); },
                      {gpu::UnaryOp::kPowScalar, e});
  if (compute_requires_grad({&a})) {
    auto node = make_node<PowScalarBackward>({&a});
    node->self = a;
    node->exponent = e;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa
