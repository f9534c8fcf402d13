// Composite attention. Under autocast its inputs go to the lower-precision dtype once, at the entry,
// and the body runs with autocast suspended, so the inner softmax stays in that dtype (its fp32
// category applies to a user's softmax call, not to this op's internals).
#include "ops/attention/attention.h"

#include <cmath>

#include "framework/autocast_state.h"
#include "ops/autocast.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/softmax/softmax.h"

namespace mantissa {

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    AttentionOptions options) {
  const std::vector<Tensor> in = amp::cast_inputs(ops::scaled_dot_product_attention, {q_in, k_in, v_in});
  AutocastSuspend body;
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  constexpr std::string_view kOp = "scaled_dot_product_attention";
  MT_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, kOp, ": q, k and v need at least 2 dims [..., T, D], got ",
           shape_str(q.shape()), ", ", shape_str(k.shape()), " and ", shape_str(v.shape()));
  MT_CHECK(q.size(-1) == k.size(-1), kOp, ": q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
           " differ in the last (head) dim");
  MT_CHECK(k.size(-2) == v.size(-2), kOp, ": k ", shape_str(k.shape()), " and v ", shape_str(v.shape()),
           " differ in the sequence dim (-2)");
  const double scale = options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);  // [..., L, S]
  if (options.mask == AttentionMask::kCausal) {
    const int64_t L = q.size(-2), S = k.size(-2);
    // j > i is masked; rows/cols are broadcast over the batch dims (and live on the scores' device).
    const Tensor rows = arange(static_cast<double>(L)).reshape({L, 1}).to(scores.device());
    const Tensor cols = arange(static_cast<double>(S)).reshape({1, S}).to(scores.device());
    scores = masked_fill(scores, gt(cols, rows), -INFINITY);
  }
  return matmul(softmax(scores, -1), v);
}

}  // namespace mantissa
