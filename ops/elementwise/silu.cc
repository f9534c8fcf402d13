// SiLU (swish, torch.nn.functional.silu): x sigmoid(x), its formulas in ops/pointwise_math.h. In a file of
// its own rather than unary.cc, whose inline budget is spent (ops/elementwise/unary_entry.h).
#include "ops/cpu/vec_math.h"
#include "ops/elementwise/elementwise.h"
#include "ops/elementwise/unary_entry.h"
#include "ops/pointwise_math.h"

namespace mantissa {

Tensor silu(const Tensor& x) {
  return unary_entry::unary(
      x, ops::silu, "SiluBackward", unary_entry::Saves::kInput, [](auto v) { return pointwise::silu<cpu::VecMath>(v); },
      [](auto g, auto v) { return pointwise::silu_backward<cpu::VecMath>(g, v); }, gpu::UnaryOp::kSilu,
      gpu::BinaryOp::kSiluBackward,
      [](const Tensor& g, const Tensor& v) {
        const Tensor s = sigmoid(v);
        return g * (s * (v * (1.0 - s) + 1.0));
      });
}

}  // namespace mantissa
