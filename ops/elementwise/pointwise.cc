// addcmul and addcdiv (the optimizers' fused pointwise forms) with their backward. Promote category under
// autocast: all floating inputs go to the widest of their dtypes, as ordinary promotion would give. The
// element formulas are those of ops/pointwise_math.h (with the CPU's policy, cpu::VecMath), named again by
// the op codes for CUDA tensors.
#include "framework/autograd.h"
#include "ops/autocast.h"
#include "ops/cpu/vec_math.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/typed_entries.h"
#include "ops/pointwise_math.h"
#include "ops/reduce/reduce.h"

namespace mantissa {
namespace {

enum class AddcOp { kMul, kDiv };

struct AddcBackward final : Node {
  AddcOp op;
  double value = 1.0;
  SavedTensor t1{this, "tensor1"};  // saved when tensor2 needs a gradient
  SavedTensor t2{this, "tensor2"};  // saved when tensor1 needs one (or, for addcdiv, tensor2 does)
  Shape self_shape, t1_shape, t2_shape;
  DType self_dtype, t1_dtype, t2_dtype;
  explicit AddcBackward(AddcOp o) : op(o) {}
  std::string_view name() const override { return op == AddcOp::kMul ? "AddcmulBackward" : "AddcdivBackward"; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const Tensor& g = grads[0];
    const double v = value;
    Tensor g_self, g_t1, g_t2;
    if (next_edges[0].valid()) g_self = sum_to(g, self_shape).to(self_dtype);
    if (compute_requires_grad({&g, &t1.get(), &t2.get()})) {
      // create_graph: the formulas below with differentiable ops, in the same order of operations.
      const Tensor gv = mul(g, v);
      if (op == AddcOp::kMul) {
        if (next_edges[1].valid()) g_t1 = sum_to(mul(gv, t2.get()), t1_shape).to(t1_dtype);
        if (next_edges[2].valid()) g_t2 = sum_to(mul(gv, t1.get()), t2_shape).to(t2_dtype);
      } else {
        if (next_edges[1].valid()) g_t1 = sum_to(div(gv, t2.get()), t1_shape).to(t1_dtype);
        if (next_edges[2].valid()) {
          g_t2 = sum_to(div(mul(neg(gv), t1.get()), mul(t2.get(), t2.get())), t2_shape).to(t2_dtype);
        }
      }
      return {g_self, g_t1, g_t2};
    }
    if (op == AddcOp::kMul) {
      auto scaled = [v](auto gv, auto other) { return pointwise::scaled_mul(gv, other, static_cast<decltype(gv)>(v)); };
      const gpu::PointwiseOp<gpu::BinaryOp> code{gpu::BinaryOp::kScaledMul, v};
      if (next_edges[1].valid()) g_t1 = sum_to(map_binary(g, t2.get(), name(), scaled, code), t1_shape).to(t1_dtype);
      if (next_edges[2].valid()) g_t2 = sum_to(map_binary(g, t1.get(), name(), scaled, code), t2_shape).to(t2_dtype);
    } else {
      // d/dt1 = v / t2, d/dt2 = -v t1 / t2^2.
      auto d_t1 = [v](auto gv, auto b) { return pointwise::scaled_div(gv, b, static_cast<decltype(gv)>(v)); };
      auto d_t2 = [v](auto gv, auto a, auto b) {
        return pointwise::addcdiv_backward(gv, a, b, static_cast<decltype(gv)>(v));
      };
      if (next_edges[1].valid()) {
        g_t1 = sum_to(map_binary(g, t2.get(), name(), d_t1, {gpu::BinaryOp::kScaledDiv, v}), t1_shape).to(t1_dtype);
      }
      if (next_edges[2].valid()) {
        g_t2 = sum_to(map_ternary(g, t1.get(), t2.get(), name(), d_t2, {gpu::TernaryOp::kAddcdivBackward, v}), t2_shape)
                   .to(t2_dtype);
      }
    }
    return {g_self, g_t1, g_t2};
  }
};

template <typename F>
Tensor addc(const OpInfo& info, AddcOp op, const Tensor& self_in, const Tensor& t1_in, const Tensor& t2_in,
            double value, F&& f) {
  const std::vector<Tensor> in = amp::cast_inputs(info, {self_in, t1_in, t2_in});
  const std::string_view op_name = info.name;
  const Tensor &self = in[0], &t1 = in[1], &t2 = in[2];
  MT_CHECK(self.defined() && t1.defined() && t2.defined(), op_name, ": self, tensor1 and tensor2 must be defined");
  Tensor out = map_ternary(self, t1, t2, op_name, f,
                           {op == AddcOp::kMul ? gpu::TernaryOp::kAddcmul : gpu::TernaryOp::kAddcdiv, value});
  if (compute_requires_grad({&self, &t1, &t2})) {
    auto node = make_node<AddcBackward>({&self, &t1, &t2}, op);
    node->value = value;
    node->self_shape = self.shape();
    node->t1_shape = t1.shape();
    node->t2_shape = t2.shape();
    node->self_dtype = self.dtype();
    node->t1_dtype = t1.dtype();
    node->t2_dtype = t2.dtype();
    if (t2.requires_grad()) node->t1 = t1;
    if (t1.requires_grad() || (op == AddcOp::kDiv && t2.requires_grad())) node->t2 = t2;
    set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  return addc(ops::addcmul, AddcOp::kMul, self, t1, t2, value, [value](auto s, auto a, auto b) {
    return pointwise::addcmul<cpu::VecMath>(s, a, b, static_cast<decltype(s)>(value));
  });
}

Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value) {
  return addc(ops::addcdiv, AddcOp::kDiv, self, t1, t2, value,
              [value](auto s, auto a, auto b) { return pointwise::addcdiv(s, a, b, static_cast<decltype(s)>(value)); });
}

}  // namespace mantissa
