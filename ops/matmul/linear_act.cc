// linear_act: act(x @ weight^T + bias) as one op, its backward, and its create_graph form. The kernels are
// ops/matmul/linear_act_cpu.h; the backward's two GEMMs are the matmul family's primitive (run_gemm).
#include <algorithm>

#include "framework/autograd.h"
#include "framework/device_kernels.h"
#include "framework/profiler/profiler.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/fp8/fp8.h"
#include "ops/matmul/linear_act_cpu.h"
#include "ops/matmul/matmul.h"
#include "ops/matmul/matmul_internal.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

constexpr std::string_view kOp = "linear_act";

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// x2 [rows, in] with unit column stride (row stride ldx), w [out, in] and bias contiguous.
void cpu_linear_act(const Tensor& x2, const Tensor& w, const Tensor& bias, Activation act, const Tensor& y,
                    const Tensor& pre) {
  dispatch_floating(x2.dtype(), kOp, [&]<typename T>() {
    cpu::linear_act_forward<T>({.rows = x2.size(0),
                                .in = x2.size(1),
                                .out = w.size(0),
                                .x = x2.data<T>(),
                                .ldx = x2.size(0) > 1 ? x2.stride(0) : x2.size(1),
                                .w = w.data<T>(),
                                .bias = ptr_or_null<T>(bias),
                                .act = act,
                                .y = y.data<T>(),
                                .pre = ptr_or_null<T>(pre)});
  });
}

void cpu_linear_act_grad(const Tensor& g, const Tensor& saved, Activation act, const Tensor& dh, const Tensor& dbias) {
  dispatch_floating(g.dtype(), "LinearActBackward", [&]<typename T>() {
    cpu::linear_act_backward<T>({.rows = g.size(0),
                                 .out = g.size(1),
                                 .act = act,
                                 .g = g.data<T>(),
                                 .saved = saved.data<T>(),
                                 .dh = dh.data<T>(),
                                 .dbias = ptr_or_null<T>(dbias)});
  });
}

// CPU only: CUDA tensors take the composed ops (see linear_act below).
constexpr DeviceKernels<decltype(cpu_linear_act)> kLinearAct{.cpu = &cpu_linear_act};
constexpr DeviceKernels<decltype(cpu_linear_act_grad)> kLinearActGrad{.cpu = &cpu_linear_act_grad};

// y [rows, out] = act(h), h = x [rows, in] @ w^T + bias:
//   dh = g * act'(h) (ReLU reads y), dbias = sum of dh's rows, dx = dh @ w, dw = dh^T @ x.
struct LinearActBackward final : Node {
  SavedTensor input{this, "input"};  // x as [rows, in] (a view of it where its strides allow)
  SavedTensor weight{this, "weight"};
  SavedTensor bias{this, "bias"};     // only for create_graph's recomputation
  SavedTensor saved{this, "result"};  // the pre-activation [rows, out] (GELU) or the output (ReLU)
  Activation act = Activation::kNone;
  int64_t rows = 0, out = 0;
  Shape input_shape;
  std::string_view name() const override { return "LinearActBackward"; }
  bool supports_create_graph() const override { return true; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor s = saved.get().reshape({rows, out});
    const Tensor g = grads[0].to(s.dtype()).reshape({rows, out}).contiguous();
    if (compute_requires_grad({&g, &input.get(), &weight.get()})) return graph_backward(g);
    const TensorOptions like{.dtype = s.dtype(), .device = s.device()};
    const Tensor dh = empty(s.shape(), like);
    const Tensor db = next_edges[2].valid() ? empty({s.size(1)}, like) : Tensor();
    {
      profiler::RecordScope scope(name(), profiler::Category::kOp, s.device());
      dispatch(name(), kLinearActGrad, s.device(), g, s, act, dh, db);
    }
    Tensor dx, dw;
    const Tensor dh3 = dh.unsqueeze(0);
    if (next_edges[0].valid()) dx = run_gemm({}, dh3, weight.get().unsqueeze(0), 0.0, 1.0).view(input_shape);
    if (next_edges[1].valid()) dw = run_gemm({}, dh3.transpose(1, 2), input.get().unsqueeze(0), 0.0, 1.0).squeeze(0);
    return {dx, dw, db};
  }

  // Under create_graph: h recomputed by the composed linear, the activation's derivative and the products
  // as differentiable ops.
  std::vector<Tensor> graph_backward(const Tensor& g) const {
    const Tensor& x = input.get();
    const Tensor& w = weight.get();
    const Tensor h = linear(x, w, bias.defined() ? bias.get() : Tensor());
    Tensor dh;
    switch (act) {
      case Activation::kNone: dh = g; break;
      case Activation::kRelu: dh = where(gt(h, 0.0), g, zeros({}, {.dtype = g.dtype(), .device = g.device()})); break;
      case Activation::kGelu: dh = gelu_backward(g, h); break;
      case Activation::kGeluTanh: dh = gelu_backward(g, h, GeluApproximation::kTanh); break;
    }
    Tensor dx, dw, db;
    if (next_edges[0].valid()) dx = matmul(dh, w).reshape(input_shape);
    if (next_edges[1].valid()) dw = matmul(dh.t(), x);
    if (next_edges[2].valid()) db = sum(dh, {0});
    return {dx, dw, db};
  }
};

}  // namespace

Tensor activate(const Tensor& x, Activation act) {
  switch (act) {
    case Activation::kNone: return x;
    case Activation::kRelu: return relu(x);
    case Activation::kGelu: return gelu(x);
    case Activation::kGeluTanh: return gelu(x, GeluApproximation::kTanh);
  }
  return x;
}

Tensor linear_act(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Activation act) {
  if (act == Activation::kNone) return linear(x_in, weight_in, bias_in);
  // FP8 training routes linear through its override (ops/fp8/fp8.h); the activation then follows as its op.
  if (Tensor routed = try_linear_override(x_in, weight_in, bias_in); routed.defined()) return activate(routed, act);
  const std::vector<Tensor> cast = amp::cast_inputs(ops::linear, {x_in, weight_in, bias_in});  // linear's category
  const Tensor &x = cast[0], &weight = cast[1], &bias = cast[2];
  check_linear(kOp, x, weight, bias);
  // CUDA: linear (its bias in cuBLASLt's epilogue) then the activation's kernel. cuBLASLt's GELU epilogues
  // are the tanh form only, and no fused kernel of mantissa's own is written yet.
  if (!x.device().is_cpu()) return activate(linear(x, weight, bias), act);

  const int64_t in = weight.size(1), out = weight.size(0), rows = x.numel() / std::max<int64_t>(in, 1);
  Tensor x2 = x.reshape({rows, in});
  if (x2.stride(1) != 1 || (rows > 1 && x2.stride(0) < in)) x2 = x2.contiguous();
  const Tensor w = weight.contiguous();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const bool grad = compute_requires_grad({&x, &weight, &bias});
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  Shape out_shape = x.shape();
  out_shape.back() = out;
  Tensor y = empty(out_shape, like);
  const Tensor pre = grad && activation_saves_input(act) ? empty({rows, out}, like) : Tensor();
  {
    profiler::RecordScope scope(kOp, profiler::Category::kOp, x.device());
    if (scope.active()) {
      scope.add_input(x2);
      scope.add_input(w);
      scope.add_flops(2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out));
    }
    dispatch(kOp, kLinearAct, x.device(), x2, w, b, act, y.view({rows, out}), pre);
  }
  if (grad) {
    auto node = make_node<LinearActBackward>({&x, &weight, &bias});
    node->input = x2;
    node->weight = w;
    if (b.defined()) node->bias = b;
    node->act = act;
    node->rows = rows;
    node->out = out;
    node->input_shape = x.shape();
    set_history(y, node);
    node->saved = pre.defined() ? pre : y;  // y: kept as the node's output, without history
  }
  return y;
}

}  // namespace mantissa
