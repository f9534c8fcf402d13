// Elementwise losses: l1_loss, smooth_l1_loss, binary_cross_entropy and binary_cross_entropy_with_logits.
// Each is a loss functor f(x, y) and two derivative functors (d/dx, d/dy) in the compute type, and the
// same two derivatives on tensors with differentiable ops for create_graph; one forward and one backward
// node serve all four. Reduced forms sum unrounded fp32 (f64) losses and round once; autocast runs all
// but binary_cross_entropy in fp32 and refuses that one.
#include <algorithm>
#include <cmath>
#include <functional>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/typed_entries_cpu.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

// The derivatives on tensors with differentiable ops (create_graph): (g, x, y) -> that input's gradient,
// for an upstream gradient g already scaled.
using GraphGrad = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
struct GraphGrads {
  GraphGrad dx, dy;
};

// The upstream gradient is per element (kNone) or one value; kMean also divides by the element count.
// DX and DY take (g, x, y) in the compute type and return that input's gradient.
template <typename DX, typename DY>
struct PointwiseLossBackward final : Node {
  SavedTensor input{this, "self"};
  SavedTensor target{this, "target"};
  const char* op_name;
  double scale = 1.0;  // 1/numel for kMean, else 1
  DX dx;
  DY dy;
  GraphGrads graph;
  PointwiseLossBackward(const char* name, DX fx, DY fy, GraphGrads gr)
      : op_name(name), dx(std::move(fx)), dy(std::move(fy)), graph(std::move(gr)) {}
  std::string_view name() const override { return op_name; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor &x = input.get(), &y = target.get();
    const double k = scale;
    Tensor gx, gy;
    if (compute_requires_grad({&grads[0], &x, &y})) {
      const Tensor g = k == 1.0 ? grads[0] : mul(grads[0], k);
      if (next_edges[0].valid()) gx = graph.dx(g, x, y).to(x.dtype());
      if (next_edges[1].valid()) gy = graph.dy(g, x, y).to(y.dtype());
      return {gx, gy};
    }
    if (next_edges[0].valid()) {
      gx = map_ternary(grads[0], x, y, op_name, [k, this](auto g, auto a, auto b) {
             return dx(g * static_cast<decltype(g)>(k), a, b);
           }).to(x.dtype());
    }
    if (next_edges[1].valid()) {
      gy = map_ternary(grads[0], x, y, op_name, [k, this](auto g, auto a, auto b) {
             return dy(g * static_cast<decltype(g)>(k), a, b);
           }).to(y.dtype());
    }
    return {gx, gy};
  }
};

void check_pair(std::string_view op, const Tensor& input, const Tensor& target) {
  MT_CHECK(input.defined() && target.defined(), op, ": input and target must be defined tensors");
  MT_CHECK(input.shape() == target.shape(), op, ": input ", shape_str(input.shape()), " and target ",
           shape_str(target.shape()),
           " must have the same shape. HINT: reshape or expand the target "
           "explicitly; silent broadcasting in a loss hides bugs");
  MT_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op, ": expected floating tensors, got ",
           dtype_name(input.dtype()), " and ", dtype_name(target.dtype()),
           ". HINT: convert integer targets with .to(kF32)");
  MT_CHECK(input.device() == target.device(), op, ": no kernel for ", input.device().str(), " / ",
           target.device().str(), " in this build. HINT: put the input and the target on one device");
  if (!input.device().is_cpu())
    no_kernel(op, input.device());  // the functors run on the CPU only (ops/elementwise/typed_entries_cpu.h)
}

// binary_cross_entropy takes probabilities; PyTorch checks the range too.
void check_probabilities(std::string_view op, const Tensor& x) {
  const Tensor c = x.to(DType::kF64).contiguous();
  const double* p = c.data<double>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    MT_CHECK(p[i] >= 0.0 && p[i] <= 1.0, op, ": input element ", i, " is ", p[i], "; every input must lie in [0, 1]",
             ". HINT: pass sigmoid(logits), or better, use binary_cross_entropy_with_logits on the logits");
  }
}

// What the input holds: any value, or probabilities (checked to lie in [0, 1]).
enum class InputDomain { kAny, kProbability };

template <typename F, typename DX, typename DY>
Tensor pointwise_loss(const OpInfo& info, const char* backward_name, const Tensor& input_in, const Tensor& target_in,
                      Reduction reduction, InputDomain domain, F f, DX dx, DY dy, GraphGrads graph) {
  const std::vector<Tensor> in = amp::cast_inputs(info, {input_in, target_in});
  const std::string_view op = info.name;
  const Tensor &input = in[0], &target = in[1];
  check_pair(op, input, target);
  const DType dtype = promote_types(input.dtype(), target.dtype());
  if (domain == InputDomain::kProbability) check_probabilities(op, input);
  Tensor out;
  if (reduction == Reduction::kNone) {
    out = map_binary(input, target, op, f);
  } else {
    // Per-element losses in the compute type, summed before the one rounding to dtype.
    NoGradGuard no_grad;
    const DType compute = dtype == DType::kF64 ? DType::kF64 : DType::kF32;
    const Tensor elem = map_binary(input.to(compute), target.to(compute), op, f);
    double total = sum(elem).item();
    if (reduction == Reduction::kMean) total /= static_cast<double>(elem.numel());  // empty: nan, as PyTorch
    out = full({}, total, {.dtype = dtype});
  }
  if (compute_requires_grad({&input, &target})) {
    auto node = make_node<PointwiseLossBackward<DX, DY>>({&input, &target}, backward_name, dx, dy, std::move(graph));
    node->input = input;
    node->target = target;
    node->scale = reduction == Reduction::kMean ? 1.0 / static_cast<double>(input.numel()) : 1.0;
    set_history(out, node);
  }
  return out;
}

template <typename C>
C sign(C v) {
  return v > C(0) ? C(1) : (v < C(0) ? C(-1) : C(0));
}

// sign(d) as 1 / 0 / -1 in d's dtype, without history: its derivative is 0 wherever it has one.
Tensor sign_tensor(const Tensor& d) { return sub(gt(d, 0.0).to(d.dtype()), lt(d, 0.0).to(d.dtype())); }

// The derivatives on tensors (create_graph) that the losses below pass after their functors, the same formulas.
Tensor l1_graph_dx(const Tensor& g, const Tensor& x, const Tensor& y) { return mul(g, sign_tensor(sub(x, y))); }
Tensor l1_graph_dy(const Tensor& g, const Tensor& x, const Tensor& y) { return mul(neg(g), sign_tensor(sub(x, y))); }

// smooth_l1's slope on tensors: d / beta inside the quadratic zone (recorded), sign(d) outside. beta 0 has
// no quadratic zone, and d / 0 is kept out of the graph (its inf would turn the masked zeros into NaN).
Tensor graph_slope(const Tensor& d, double beta) {
  if (beta == 0.0) return sign_tensor(d);
  return where(lt(abs(d.detach()), beta), div(d, beta), sign_tensor(d));
}
GraphGrads smooth_l1_graph(double beta) {
  GraphGrads graph;
  graph.dx = [beta](const Tensor& g, const Tensor& x, const Tensor& y) { return mul(g, graph_slope(sub(x, y), beta)); };
  graph.dy = [beta](const Tensor& g, const Tensor& x, const Tensor& y) {
    return mul(neg(g), graph_slope(sub(x, y), beta));
  };
  return graph;
}

// binary_cross_entropy's: clamp for max, and log(1 - x) for log1p(-x) (the ops have no log1p).
Tensor bce_graph_dx(const Tensor& g, const Tensor& x, const Tensor& y) {
  return div(mul(g, sub(x, y)), clamp(mul(1.0 - x, x), 1e-12, std::nullopt));
}
Tensor bce_graph_dy(const Tensor& g, const Tensor& x, const Tensor&) {
  return mul(g, sub(clamp(log(1.0 - x), -100.0, std::nullopt), clamp(log(x), -100.0, std::nullopt)));
}

Tensor bce_logits_graph_dx(const Tensor& g, const Tensor& x, const Tensor& y) { return mul(g, sub(sigmoid(x), y)); }
Tensor bce_logits_graph_dy(const Tensor& g, const Tensor& x, const Tensor&) { return mul(neg(g), x); }

}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(
      ops::l1_loss, "L1LossBackward", input, target, reduction, InputDomain::kAny,
      [](auto x, auto y) { return std::abs(x - y); }, [](auto g, auto x, auto y) { return g * sign(x - y); },
      [](auto g, auto x, auto y) { return -g * sign(x - y); }, {.dx = &l1_graph_dx, .dy = &l1_graph_dy});
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1Options options) {
  const double beta = options.beta;
  MT_CHECK(beta >= 0.0, "smooth_l1_loss: beta must be non-negative, got ", beta);
  // d/dd: d / beta inside the quadratic zone, sign(d) outside.
  auto slope = [beta](auto d) {
    using C = decltype(d);
    return std::abs(d) < C(beta) ? d / C(beta) : sign(d);
  };
  return pointwise_loss(
      ops::smooth_l1_loss, "SmoothL1LossBackward", input, target, options.reduction, InputDomain::kAny,
      [beta](auto x, auto y) {
        using C = decltype(x);
        const C d = std::abs(x - y);
        return d < C(beta) ? C(0.5) * d * d / C(beta) : d - C(0.5 * beta);
      },
      [slope](auto g, auto x, auto y) { return g * slope(x - y); },
      [slope](auto g, auto x, auto y) { return -g * slope(x - y); }, smooth_l1_graph(beta));
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(
      ops::binary_cross_entropy, "BinaryCrossEntropyBackward", input, target, reduction, InputDomain::kProbability,
      [](auto x, auto y) {
        using C = decltype(x);
        const C log_x = std::max(std::log(x), C(-100)), log_1mx = std::max(std::log1p(-x), C(-100));
        return -(y * log_x + (C(1) - y) * log_1mx);
      },
      // (x - y) / (x (1 - x)), the denominator kept from 0 as PyTorch does (EPSILON 1e-12).
      [](auto g, auto x, auto y) {
        using C = decltype(g);
        return g * (x - y) / std::max((C(1) - x) * x, C(1e-12));
      },
      [](auto g, auto x, auto) {
        using C = decltype(g);
        return g * (std::max(std::log1p(-x), C(-100)) - std::max(std::log(x), C(-100)));
      },
      {.dx = &bce_graph_dx, .dy = &bce_graph_dy});
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, Reduction reduction) {
  return pointwise_loss(
      ops::binary_cross_entropy_with_logits, "BinaryCrossEntropyWithLogitsBackward", input, target, reduction,
      InputDomain::kAny,
      [](auto x, auto y) {
        using C = decltype(x);
        return std::max(x, C(0)) - x * y + std::log1p(std::exp(-std::abs(x)));
      },
      [](auto g, auto x, auto y) {
        using C = decltype(g);
        return g * (C(1) / (C(1) + std::exp(-x)) - y);
      },
      [](auto g, auto x, auto) { return -g * x; }, {.dx = &bce_logits_graph_dx, .dy = &bce_logits_graph_dy});
}

}  // namespace mantissa
