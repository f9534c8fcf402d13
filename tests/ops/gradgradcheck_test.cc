// Second derivatives of every op whose backward supports create_graph, through the one harness
// (gradgradcheck: the gradient of <grad(y, x; v, create_graph), u> with respect to the inputs and to v,
// against f64 central differences of first-order gradients), with contiguous, transposed and strided inputs;
// and a test that every op of the registry (ops/op.h's all_ops()) has a case here or a checked exemption,
// so that a new op without second derivatives fails here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/attention/attention.h"
#include "ops/conv/conv.h"
#include "ops/dropout/dropout.h"
#include "ops/elementwise/elementwise.h"
#include "ops/embedding/embedding.h"
#include "ops/fp8/blocks.h"
#include "ops/fp8/fp8.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/op.h"
#include "ops/pool/pool.h"
#include "ops/recompute/recompute.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"
#include "tests/support/gradcheck.h"

namespace mantissa::testing {
namespace {

using In = std::vector<Tensor>;

struct Case {
  std::string name;
  GradcheckFn fn;
  In inputs;
  GradcheckOptions options = {};
};

Tensor rnd(const Shape& s, uint64_t seed, RandomInputOptions o = {}) { return random_input(s, seed, o); }
// Kinks (relu, abs, clamp, max) are kept 0.05 away; log, sqrt, rsqrt and the divisors need x > 0.
constexpr RandomInputOptions kAwayFromZero{.low = -2.0, .high = 2.0, .min_abs = 0.05};
constexpr RandomInputOptions kPositive{.low = 0.4, .high = 2.5};
// Probabilities away from 0 and 1, where binary_cross_entropy's derivatives are steep; targets in [0, 1].
constexpr RandomInputOptions kProbability{.low = 0.1, .high = 0.9};
constexpr RandomInputOptions kUnit{.low = 0.0, .high = 1.0};
// Disjoint ranges keep l1's and smooth_l1's kink |x - y| = 0 (and smooth_l1's |x - y| = beta = 0.5) away:
// squares of kHigh lie in [1.44, 4], kSmall in [-0.3, 0.3], so the differences lie in [1.14, 4.3].
constexpr RandomInputOptions kHigh{.low = 1.2, .high = 2.0};
constexpr RandomInputOptions kSmall{.low = -0.3, .high = 0.3};

Tensor i64(std::vector<int64_t> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector<int64_t>(v, shape);
}
Tensor f64(std::vector<double> v, Shape shape) { return from_vector<double>(v, shape); }

std::vector<Case> matmul_cases() {
  return {
      {"mm", [](const In& x) { return mm(x[0], x[1]); }, {rnd({3, 4}, 1), rnd({4, 2}, 2)}},
      {"bmm", [](const In& x) { return bmm(x[0], x[1]); }, {rnd({2, 3, 2}, 3), rnd({2, 2, 3}, 4)}},
      {"matmul_dot", [](const In& x) { return matmul(x[0], x[1]); }, {rnd({4}, 5), rnd({4}, 6)}},
      {"matmul_matrix_vector", [](const In& x) { return matmul(x[0], x[1]); }, {rnd({3, 4}, 7), rnd({4}, 8)}},
      {"matmul_broadcast_batch",
       [](const In& x) { return matmul(x[0], x[1]); },
       {rnd({2, 1, 2, 3}, 9), rnd({2, 3, 2}, 10)}},
      {"matmul_matrix_batched", [](const In& x) { return matmul(x[0], x[1]); }, {rnd({2, 3}, 11), rnd({2, 3, 2}, 12)}},
      {"linear",
       [](const In& x) { return linear(x[0], x[1], x[2]); },
       {rnd({4, 3}, 13), rnd({2, 3}, 14), rnd({2}, 15)}},
      {"linear_3d_no_bias", [](const In& x) { return linear(x[0], x[1]); }, {rnd({2, 2, 3}, 16), rnd({2, 3}, 17)}},
      {"addmm_broadcast_bias",
       [](const In& x) { return addmm(x[0], x[1], x[2], 0.5, -2.0); },
       {rnd({3}, 18), rnd({2, 4}, 19), rnd({4, 3}, 20)}},
      {"baddbmm",
       [](const In& x) { return baddbmm(x[0], x[1], x[2], 2.0, 0.5); },
       {rnd({2, 2, 2}, 21), rnd({2, 2, 3}, 22), rnd({2, 3, 2}, 23)}},
      {"dot", [](const In& x) { return dot(x[0], x[1]) * x[0]; }, {rnd({3}, 24), rnd({3}, 25)}},
      // Attention is composed from matmul, masked_fill and softmax; q, k and v each meet the others.
      {"scaled_dot_product_attention",
       [](const In& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
       {rnd({2, 3, 4}, 261), rnd({2, 5, 4}, 262), rnd({2, 5, 2}, 263)}},
      {"scaled_dot_product_attention_causal_scaled",
       [](const In& x) {
         return scaled_dot_product_attention(x[0], x[1], x[2], {.mask = AttentionMask::kCausal, .scale = 0.3});
       },
       {rnd({1, 2, 3, 2}, 264), rnd({2, 3, 2}, 265), rnd({1, 2, 3, 3}, 266)}},
      // Products are bilinear: what makes a second derivative non-zero is an input met twice.
      {"mm_self", [](const In& x) { return mm(x[0], x[0].t()); }, {rnd({3, 2}, 26)}},
  };
}

std::vector<Case> view_cases() {
  return {
      {"reshape",
       [](const In& x) {
         return x[0].reshape({4, -1}) * x[0].reshape({4, -1});
       },
       {rnd({2, 3, 2}, 30)}},
      {"transpose", [](const In& x) { return x[0].transpose(0, 2) * x[1]; }, {rnd({2, 3, 2}, 31), rnd({2, 3, 2}, 32)}},
      {"permute",
       [](const In& x) {
         return x[0].permute({2, 0, 1}) * x[1];
       },
       {rnd({2, 3, 2}, 33), rnd({2, 2, 3}, 34)}},
      {"slice_step", [](const In& x) { return x[0].slice(1, 1, 6, 2) * x[0].slice(1, 0, 5, 2); }, {rnd({2, 7}, 35)}},
      {"narrow_and_select", [](const In& x) { return x[0].narrow(0, 1, 2) * x[0].select(0, 0); }, {rnd({3, 4}, 36)}},
      {"expand",
       [](const In& x) {
         return x[0].expand({2, 3, 4}) * x[1];
       },
       {rnd({3, 1}, 37), rnd({2, 3, 4}, 38)}},
      {"unsqueeze_flatten", [](const In& x) { return x[0].unsqueeze(0).flatten(0, 1) * x[0]; }, {rnd({3, 4}, 39)}},
      {"clone_contiguous", [](const In& x) { return x[0].t().contiguous() * x[0].t().clone(); }, {rnd({3, 4}, 40)}},
      // Through f32 and back (the cast node both ways): see gradcheck_test.cc's to_f32_and_back for the
      // eps and atol that f32 rounding needs.
      {"to_f32_and_back",
       [](const In& x) { return x[0].to(DType::kF32).to(DType::kF64) * x[0]; },
       {rnd({3, 4}, 41)},
       {.eps = 1e-2, .atol = 1e-4}},
  };
}

std::vector<Case> elementwise_cases() {
  return {
      {"add", [](const In& x) { return add(x[0], x[1]) * x[0]; }, {rnd({3, 4}, 50), rnd({3, 4}, 51)}},
      {"add_broadcast", [](const In& x) { return (x[0] + x[1]) * x[1]; }, {rnd({3, 1, 2}, 52), rnd({4, 2}, 53)}},
      {"sub_broadcast", [](const In& x) { return sub(x[0], x[1]) * x[0]; }, {rnd({4, 1}, 54), rnd({3}, 55)}},
      {"mul", [](const In& x) { return mul(x[0], x[1]); }, {rnd({3, 4}, 56), rnd({3, 4}, 57)}},
      {"mul_broadcast_square", [](const In& x) { return x[0] * x[1] * x[0]; }, {rnd({3, 2, 2}, 58), rnd({2}, 59)}},
      {"div", [](const In& x) { return div(x[0], x[1]); }, {rnd({3, 4}, 60), rnd({3, 4}, 61, kAwayFromZero)}},
      {"div_broadcast", [](const In& x) { return x[0] / x[1]; }, {rnd({2, 1, 3}, 62), rnd({4, 1}, 63, kPositive)}},
      {"scalar_ops", [](const In& x) { return (1.5 - (x[0] - 0.5) * 3.0 + 2.5) / 4.0 * neg(x[0]); }, {rnd({2, 3}, 64)}},
      {"pow_scalar_2", [](const In& x) { return pow(x[0], 2.0); }, {rnd({3, 4}, 65)}},
      {"pow_scalar_3", [](const In& x) { return pow(x[0], 3.0); }, {rnd({3, 4}, 66)}},
      {"pow_scalar_fractional", [](const In& x) { return pow(x[0], -1.5); }, {rnd({3, 4}, 67, kPositive)}},
      {"pow_scalar_0", [](const In& x) { return pow(x[0], 0.0) * x[0]; }, {rnd({3, 4}, 68)}},
      {"pow_tensor_broadcast",
       [](const In& x) { return pow(x[0], x[1]); },
       {rnd({3, 4}, 180, kPositive), rnd({4}, 181)}},
      // Exponents that are exactly 0 in column 1 (the kernels' e == 0 branch): the gradients stay finite.
      {"pow_tensor_zero_exponent",
       [](const In& x) {
         return pow(x[0], x[1] * f64({1, 0, 1}, {3})) * x[1];
       },
       {rnd({2, 3}, 182, kPositive), rnd({3}, 183)}},
      {"addcmul_broadcast",
       [](const In& x) { return addcmul(x[0], x[1], x[2], 0.7); },
       {rnd({3, 1}, 184), rnd({3, 4}, 185), rnd({4}, 186)}},
      {"addcmul_shared",
       [](const In& x) { return addcmul(x[0] * x[0], x[0], x[1], -2.0); },
       {rnd({2, 3}, 187), rnd({2, 3}, 188)}},
      {"addcdiv_broadcast",
       [](const In& x) { return addcdiv(x[0], x[1], x[2], -1.3); },
       {rnd({4}, 189), rnd({3, 4}, 190), rnd({3, 1}, 191, {.low = 0.5, .high = 2.0})}},
      {"exp", [](const In& x) { return exp(x[0]); }, {rnd({3, 4}, 69)}},
      {"log", [](const In& x) { return log(x[0]); }, {rnd({3, 4}, 70, kPositive)}},
      {"sqrt", [](const In& x) { return sqrt(x[0]); }, {rnd({3, 4}, 71, kPositive)}},
      {"rsqrt", [](const In& x) { return rsqrt(x[0]); }, {rnd({3, 4}, 72, kPositive)}},
      {"abs", [](const In& x) { return abs(x[0]) * x[0]; }, {rnd({3, 4}, 73, kAwayFromZero)}},
      {"relu", [](const In& x) { return relu(x[0]) * x[0]; }, {rnd({3, 4}, 74, kAwayFromZero)}},
      {"gelu_erf", [](const In& x) { return gelu(x[0]); }, {rnd({3, 4}, 75, {.low = -4, .high = 4})}},
      {"gelu_tanh",
       [](const In& x) { return gelu(x[0], GeluApproximation::kTanh); },
       {rnd({3, 4}, 76, {.low = -4, .high = 4})}},
      {"tanh", [](const In& x) { return tanh(x[0]); }, {rnd({3, 4}, 77)}},
      {"sigmoid", [](const In& x) { return sigmoid(x[0]); }, {rnd({3, 4}, 78, {.low = -5, .high = 5})}},
      {"silu", [](const In& x) { return silu(x[0]); }, {rnd({3, 4}, 902, {.low = -5, .high = 5})}},
      // Random inputs land within eps of a clamp bound with probability ~1e-6 per element.
      {"clamp", [](const In& x) { return clamp(x[0], -0.5, 0.7) * x[0]; }, {rnd({4, 5}, 79)}},
      {"where_broadcast",
       [](const In& x) { return where(x[0], x[1] * x[1], x[2]); },
       {gt(rnd({3, 1}, 80), 0.0), rnd({3, 4}, 81), rnd({4}, 82)}},
      {"masked_fill",
       [](const In& x) { return masked_fill(x[0] * x[0], x[1], -7.0); },
       {rnd({3, 4}, 83), gt(rnd({4}, 84), 0.0)}},
      // A fresh generator with a fixed seed on every call: the same mask for every evaluation.
      {"dropout",
       [](const In& x) {
         Generator g(9);
         return dropout(x[0] * x[0], 0.4, &g);
       },
       {rnd({4, 5}, 85)}},
  };
}

std::vector<Case> reduce_cases() {
  return {
      {"sum_all", [](const In& x) { return sum(x[0]) * x[0]; }, {rnd({3, 4}, 90)}},
      {"sum_dims",
       [](const In& x) {
         return sum(x[0] * x[0], {0, 2});
       },
       {rnd({3, 4, 2}, 91)}},
      {"sum_keepdim", [](const In& x) { return sum(x[0], {-1}, KeepDim::kYes) * x[0]; }, {rnd({3, 4}, 92)}},
      {"mean_all", [](const In& x) { return mean(x[0]) * x[0]; }, {rnd({3, 4}, 93)}},
      {"mean_dim", [](const In& x) { return mean(x[0] * x[0], {1}); }, {rnd({3, 4, 2}, 94)}},
      {"var_all", [](const In& x) { return var(x[0]); }, {rnd({4, 3}, 95)}},
      {"var_dim", [](const In& x) { return var(x[0], {1}); }, {rnd({3, 4, 2}, 96)}},
      {"var_dims_biased_keepdim",
       [](const In& x) {
         return var(x[0], {0, 2}, {.correction = 0, .keepdim = KeepDim::kYes});
       },
       {rnd({3, 4, 2}, 97)}},
      // Random values are distinct, so max is differentiable at them.
      {"max_dim", [](const In& x) { return max(x[0] * x[0], 1).values; }, {rnd({3, 4, 2}, 98, kAwayFromZero)}},
      {"max_all", [](const In& x) { return max(x[0] * x[0]); }, {rnd({3, 4}, 99, kAwayFromZero)}},
      {"logsumexp_dim", [](const In& x) { return logsumexp(x[0], {1}); }, {rnd({3, 4, 2}, 200)}},
      {"logsumexp_dims_keepdim",
       [](const In& x) {
         return logsumexp(x[0], {0, 2}, KeepDim::kYes);
       },
       {rnd({3, 4, 2}, 201)}},
      {"logsumexp_all", [](const In& x) { return logsumexp(x[0], {}) * x[0]; }, {rnd({3, 4}, 202)}},
      {"prod_all", [](const In& x) { return prod(x[0]); }, {rnd({2, 3}, 203)}},
      // Rows of 5 and 9: the running products take 3 and 4 shifted steps, the last ones partial.
      {"prod_dim_keepdim", [](const In& x) { return prod(x[0], 1, KeepDim::kYes); }, {rnd({2, 5, 2}, 204)}},
      {"prod_dim_9", [](const In& x) { return prod(x[0], -1); }, {rnd({2, 9}, 205, {.low = 0.5, .high = 1.5})}},
      // Exact zeros among the differentiated values: one in row 0, two in row 1 (where the gradient is 0
      // but its derivative, the product of the other three, is not), none in row 2.
      {"prod_zeros_in_rows",
       [](const In& x) { return prod(x[0], 1); },
       {f64({0.7, 0.0, -1.3, 1.1, 0.0, 0.9, 0.0, -1.2, 0.8, 1.4, -0.6, 1.7}, {3, 4})}},
      {"norm_2", [](const In& x) { return norm(x[0]); }, {rnd({3, 4}, 206)}},
      {"norm_2_dim_keepdim",
       [](const In& x) { return norm(x[0], {.dims = {1}, .keepdim = KeepDim::kYes}); },
       {rnd({3, 4}, 207)}},
      // p = 1 is linear in |x|: squared so that the second derivative is not zero.
      {"norm_1_dim",
       [](const In& x) { return norm(x[0] * x[0], {.p = 1.0, .dims = {1}}); },
       {rnd({3, 4}, 208, kAwayFromZero)}},
      {"norm_3_dims",
       [](const In& x) {
         return norm(x[0], {.p = 3.0, .dims = {0, 2}, .keepdim = KeepDim::kYes});
       },
       {rnd({2, 3, 4}, 209, kAwayFromZero)}},
      {"norm_1_5", [](const In& x) { return norm(x[0], {.p = 1.5}); }, {rnd({2, 3}, 210, kAwayFromZero)}},
      // Distinct random values: a unique max |x| per slice, where max is differentiable; squared, as max.
      {"norm_inf",
       [](const In& x) { return norm(x[0] * x[0], {.p = INFINITY, .dims = {1}}); },
       {rnd({3, 5}, 211, kAwayFromZero)}},
      // cumsum is linear: multiplied by its input so that the second derivative is not zero.
      {"cumsum_0", [](const In& x) { return cumsum(x[0], 0) * x[0]; }, {rnd({4, 3}, 212)}},
      {"cumsum_last", [](const In& x) { return cumsum(x[0] * x[0], -1); }, {rnd({2, 3, 4}, 213)}},
  };
}

std::vector<Case> loss_cases() {
  return {
      {"softmax", [](const In& x) { return softmax(x[0], -1); }, {rnd({3, 5}, 110, {.low = -3, .high = 3})}},
      {"softmax_dim0", [](const In& x) { return softmax(x[0], 0); }, {rnd({4, 3, 2}, 111)}},
      {"log_softmax", [](const In& x) { return log_softmax(x[0], -1); }, {rnd({3, 5}, 112, {.low = -3, .high = 3})}},
      {"log_softmax_middle", [](const In& x) { return log_softmax(x[0], 1); }, {rnd({2, 4, 3}, 113)}},
      {"cross_entropy_mean",
       [](const In& x) { return cross_entropy(x[0], x[1]); },
       {rnd({4, 5}, 114), i64({1, 0, 4, 4})}},
      {"cross_entropy_sum_ignore_index",
       [](const In& x) { return cross_entropy(x[0], x[1], {.reduction = Reduction::kSum, .ignore_index = 2}); },
       {rnd({5, 3}, 115), i64({0, 2, 1, 2, 1})}},
      {"cross_entropy_none_spatial",
       [](const In& x) { return cross_entropy(x[0], x[1], {.reduction = Reduction::kNone}); },
       {rnd({2, 3, 2, 2}, 116), i64({0, 1, 2, 2, 1, 1, 0, 0}, {2, 2, 2})}},
      {"cross_entropy_unbatched",
       [](const In& x) { return cross_entropy(x[0], x[1]); },
       {rnd({4}, 117), from_vector<int64_t>({2}, Shape{})}},
      // nll_loss is linear in its input: squared so that the second derivative is not zero.
      {"nll_loss_mean_ignore_index",
       [](const In& x) { return nll_loss(x[0] * x[0], x[1], {.ignore_index = 0}); },
       {rnd({4, 3}, 118), i64({0, 2, 1, 2})}},
      {"mse_loss_mean", [](const In& x) { return mse_loss(x[0], x[1]); }, {rnd({3, 4}, 119), rnd({3, 4}, 120)}},
      {"mse_loss_sum",
       [](const In& x) { return mse_loss(x[0] * x[0], x[1], Reduction::kSum); },
       {rnd({5}, 121), rnd({5}, 122)}},
      {"mse_loss_none",
       [](const In& x) { return mse_loss(x[0], x[1], Reduction::kNone); },
       {rnd({2, 3}, 123), rnd({2, 3}, 124)}},
      // l1 is piecewise linear, and smooth_l1 outside its quadratic zone: squared inputs.
      {"l1_loss_mean",
       [](const In& x) { return l1_loss(x[0] * x[0], x[1]); },
       {rnd({3, 4}, 220, kHigh), rnd({3, 4}, 221, kSmall)}},
      {"l1_loss_none",
       [](const In& x) { return l1_loss(x[1], x[0] * x[0], Reduction::kNone); },
       {rnd({2, 3}, 222, kHigh), rnd({2, 3}, 223, kSmall)}},
      {"smooth_l1_loss_linear_zone",
       [](const In& x) { return smooth_l1_loss(x[0] * x[0], x[1], {.reduction = Reduction::kSum, .beta = 0.5}); },
       {rnd({3, 4}, 224, kHigh), rnd({3, 4}, 225, kSmall)}},
      {"smooth_l1_loss_quadratic_zone",
       [](const In& x) { return smooth_l1_loss(x[0], x[1], {.reduction = Reduction::kNone, .beta = 10.0}); },
       {rnd({3, 4}, 226), rnd({3, 4}, 227)}},
      {"smooth_l1_loss_beta_0",
       [](const In& x) { return smooth_l1_loss(x[0] * x[0], x[1], {.beta = 0.0}); },
       {rnd({2, 3}, 228, kHigh), rnd({2, 3}, 229, kSmall)}},
      {"binary_cross_entropy_mean",
       [](const In& x) { return binary_cross_entropy(x[0], x[1]); },
       {rnd({3, 4}, 230, kProbability), rnd({3, 4}, 231, kUnit)}},
      {"binary_cross_entropy_none",
       [](const In& x) { return binary_cross_entropy(x[0], x[1], Reduction::kNone); },
       {rnd({2, 5}, 232, kProbability), rnd({2, 5}, 233, kUnit)}},
      {"binary_cross_entropy_with_logits_mean",
       [](const In& x) { return binary_cross_entropy_with_logits(x[0], x[1]); },
       {rnd({3, 4}, 234, {.low = -4, .high = 4}), rnd({3, 4}, 235, kUnit)}},
      {"binary_cross_entropy_with_logits_none",
       [](const In& x) { return binary_cross_entropy_with_logits(x[0], x[1], Reduction::kNone); },
       {rnd({4, 3}, 236, {.low = -4, .high = 4}), rnd({4, 3}, 237, kUnit)}},
  };
}

// Convolution, pooling, normalization, and the shape ops whose backward is a scatter or a gather. Pooling
// and gather are linear (max_pool2d piecewise): their inputs are squared so that a second derivative exists.
// Random inputs are distinct, so max pooling is differentiable at them.
std::vector<Case> layer_cases() {
  return {
      {"conv2d",
       [](const In& x) { return conv2d(x[0], x[1], x[2]); },
       {rnd({2, 2, 4, 5}, 140), rnd({3, 2, 3, 3}, 141), rnd({3}, 142)}},
      {"conv2d_stride2_pad1_no_bias",
       [](const In& x) {
         return conv2d(x[0], x[1], Tensor(), {.stride = {2, 2}, .padding = {1, 1}});
       },
       {rnd({1, 2, 5, 4}, 143), rnd({2, 2, 3, 2}, 144)}},
      {"conv2d_dilation_groups",
       [](const In& x) {
         return conv2d(x[0], x[1], x[2], {.padding = {1, 0}, .dilation = {2, 1}, .groups = 2});
       },
       {rnd({1, 4, 4, 3}, 145), rnd({4, 2, 2, 2}, 146), rnd({4}, 147)}},
      {"conv2d_twice",
       [](const In& x) {
         return conv2d(tanh(conv2d(x[0], x[1], Tensor(), {.padding = {1, 1}})), x[1]);
       },
       {rnd({1, 2, 4, 4}, 148), rnd({2, 2, 3, 3}, 149, {.low = -0.5, .high = 0.5})}},
      // conv2d over a height-1 image, so its second derivatives are conv2d's; the unbatched form squeezes.
      {"conv1d",
       [](const In& x) { return conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .dilation = 2}); },
       {rnd({2, 2, 7}, 250), rnd({3, 2, 2}, 251), rnd({3}, 252)}},
      {"conv1d_groups_unbatched_twice",
       [](const In& x) {
         return conv1d(tanh(conv1d(x[0], x[1], Tensor(), {.padding = 1, .groups = 2})), x[1], Tensor(), {.groups = 2});
       },
       {rnd({4, 5}, 253), rnd({4, 2, 3}, 254, {.low = -0.5, .high = 0.5})}},
      {"max_pool2d", [](const In& x) { return max_pool2d(x[0] * x[0], {}); }, {rnd({2, 2, 4, 4}, 150, kAwayFromZero)}},
      {"max_pool2d_k3_s2_pad1",
       [](const In& x) {
         return max_pool2d(x[0] * x[0], {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
       },
       {rnd({1, 2, 5, 4}, 151, kAwayFromZero)}},
      {"avg_pool2d", [](const In& x) { return avg_pool2d(x[0] * x[0], {}); }, {rnd({2, 2, 4, 4}, 152)}},
      {"avg_pool2d_k3_s2_pad1_unbatched",
       [](const In& x) {
         return avg_pool2d(x[0] * x[0], {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
       },
       {rnd({2, 5, 4}, 153)}},
      {"layer_norm",
       [](const In& x) { return layer_norm(x[0], {4}, x[1], x[2]); },
       {rnd({3, 2, 4}, 154), rnd({4}, 155), rnd({4}, 156)}},
      {"layer_norm_two_dims_no_affine",
       [](const In& x) {
         return layer_norm(x[0], {2, 3});
       },
       {rnd({2, 2, 3}, 157)}},
      // layer_norm per group, then the per-channel affine step.
      {"group_norm",
       [](const In& x) { return group_norm(x[0], 2, x[1], x[2]); },
       {rnd({2, 4, 3}, 255), rnd({4}, 256), rnd({4}, 257)}},
      {"group_norm_no_affine_4d", [](const In& x) { return group_norm(x[0], 3, {}, {}); }, {rnd({2, 3, 2, 2}, 258)}},
      {"batch_norm_train",
       [](const In& x) {
         const Tensor rm = zeros({2}, {.dtype = DType::kF64}), rv = ones({2}, {.dtype = DType::kF64});
         return batch_norm(x[0], rm, rv, x[1], x[2], BatchNormMode::kTrain);
       },
       {rnd({3, 2, 2, 2}, 158), rnd({2}, 159), rnd({2}, 160)}},
      {"batch_norm_train_2d_no_stats",
       [](const In& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], BatchNormMode::kTrain); },
       {rnd({4, 3}, 161), rnd({3}, 162), rnd({3}, 163)}},
      // Running statistics make it affine in x: squared so that the second derivative is not zero.
      {"batch_norm_eval",
       [](const In& x) { return batch_norm(x[0] * x[0], x[1], x[2], x[3], x[4], BatchNormMode::kEval); },
       {rnd({3, 2, 2, 2}, 164), rnd({2}, 165), rnd({2}, 166, kPositive), rnd({2}, 167), rnd({2}, 168)},
       {.differentiate = {true, false, false, true, true}}},
      {"cat",
       [](const In& x) {
         return cat({x[0] * x[0], x[1]}, 1) * cat({x[1], x[0]}, 1);
       },
       {rnd({2, 3}, 169), rnd({2, 3}, 170)}},
      // stack is linear in its inputs (unsqueeze and cat): multiplied by itself.
      {"stack",
       [](const In& x) {
         return stack({x[0], x[1]}, 1) * stack({x[1], x[0] * x[0]}, -1).transpose(1, 2);
       },
       {rnd({2, 3}, 259), rnd({2, 3}, 260)}},
      {"gather",
       [](const In& x) { return gather(x[0] * x[0], 1, x[1]); },
       {rnd({3, 4}, 171), i64({0, 3, 3, 1, 2, 2, 0, 0, 1}, {3, 3})}},
      {"scatter_add",
       [](const In& x) { return scatter_add(x[0] * x[0], 0, x[2], x[1] * x[1]); },
       {rnd({3, 2}, 172), rnd({2, 2}, 173), i64({2, 0, 2, 2}, {2, 2})}},
      // embedding, index_select and index_put are linear in their floating inputs: squared, as gather.
      {"embedding_repeated_indices",
       [](const In& x) { return embedding(x[0] * x[0], x[1]); },
       {rnd({4, 3}, 240), i64({3, 0, 3, 1, 0, 3}, {2, 3})}},
      {"index_select_repeated",
       [](const In& x) { return index_select(x[0] * x[0], 1, x[1]); },
       {rnd({3, 4}, 241), i64({2, 0, 2, 3, 2})}},
      {"index_select_dim0_scalar_index",
       [](const In& x) { return index_select(x[0] * x[0], 0, x[1]) * x[0].narrow(0, 0, 1); },
       {rnd({3, 2, 2}, 242), from_vector<int64_t>({2}, Shape{})}},
      {"index_put_replace",
       [](const In& x) { return index_put(x[0] * x[0], x[2], x[1] * x[1]); },
       {rnd({4, 3}, 243), rnd({2, 3}, 244), i64({3, 0})}},
      {"index_put_accumulate_broadcast",
       [](const In& x) { return index_put(x[0] * x[0], x[2], x[1] * x[1], IndexPutMode::kAccumulate); },
       {rnd({4, 3}, 245), rnd({3}, 246), i64({1, 1, 2})}},
  };
}

// Compositions: the gradient-penalty shape (an MLP into a loss), shared inputs, several paths into one leaf.
std::vector<Case> composite_cases() {
  return {
      {"mlp_cross_entropy",
       [](const In& x) {
         const Tensor h = gelu(linear(x[0], x[1], x[2]));
         return cross_entropy(linear(tanh(h), x[3]), x[4]);
       },
       {rnd({3, 4}, 130), rnd({5, 4}, 131), rnd({5}, 132), rnd({3, 5}, 133), i64({2, 0, 1})}},
      {"mlp_relu_mse",
       [](const In& x) { return mse_loss(linear(relu(linear(x[0], x[1])), x[2]), x[3]); },
       {rnd({3, 2}, 134, kAwayFromZero), rnd({4, 2}, 135), rnd({2, 4}, 136), rnd({3, 2}, 137)}},
      {"shared_input", [](const In& x) { return x[0] * x[0] + exp(x[0]) * x[0]; }, {rnd({3, 4}, 138)}},
      {"normalize_like",
       [](const In& x) {
         const Tensor m = mean(x[0], {-1}, KeepDim::kYes);
         return (x[0] - m) * rsqrt(var(x[0], {-1}, {.correction = 0, .keepdim = KeepDim::kYes}) + 1e-5);
       },
       {rnd({3, 5}, 139)}},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto* group :
       {&matmul_cases, &view_cases, &elementwise_cases, &reduce_cases, &loss_cases, &layer_cases, &composite_cases}) {
    for (Case& c : (*group)()) all.push_back(std::move(c));
  }
  return all;
}

class GradgradcheckOp : public ::testing::TestWithParam<Case> {};

TEST_P(GradgradcheckOp, MatchesCentralDifferencesOfTheFirstDerivative) {
  const Case& c = GetParam();
  EXPECT_TRUE(gradgradcheck(c.fn, c.inputs, c.options)) << c.name;
}

INSTANTIATE_TEST_SUITE_P(All, GradgradcheckOp, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- every registered op is covered: a case above, or an exemption that is checked ----

// The registered op a case belongs to: the one whose name is the case's name, or its prefix followed by
// '_' ("softmax_dim0"); where two fit ("log" and "log_softmax" for "log_softmax_middle"), the longer name.
// Cases of ops without a descriptor (add, where, gather, ...) and compositions belong to none.
std::string_view registered_op_of(std::string_view case_name) {
  std::string_view best;
  for (const OpInfo* op : all_ops()) {
    const std::string_view name = op->name;
    const bool fits = case_name == name ||
                      (case_name.starts_with(name) && case_name.size() > name.size() && case_name[name.size()] == '_');
    if (fits && name.size() > best.size()) best = name;
  }
  return best;
}

// The registered ops that have no second derivative to check, each with the reason and a check that the
// reason holds: their results never carry autograd history, even from inputs that require grad.
struct Exemption {
  const OpInfo* op;
  std::string_view why;
  std::function<std::vector<Tensor>(const Tensor& x)> results;  // the op's results from an x that requires grad
};

std::vector<Exemption> exemptions() {
  const Tensor one = from_vector<float>({1.0f}, Shape{});
  return {
      {&ops::quantize_fp8,
       "not differentiable: FP8 bits with an amax and an overflow count (amp/fp8.h's "
       "fp8_linear owns the gradients of FP8 training)",
       [one](const Tensor& x) {
         const Fp8Quantized q = quantize_fp8(x, one, DType::kF8E4M3, Fp8Overflow::kSaturate);
         return std::vector<Tensor>{q.data, q.amax, q.overflow};
       }},
      {&ops::amax, "not differentiable: the scale statistic of FP8 quantization, read before the cast",
       [](const Tensor& x) { return std::vector<Tensor>{amax(x)}; }},
      {&ops::scaled_mm, "not differentiable: FP8 operands (fp8_linear computes its gradients with scaled_mm too)",
       [one](const Tensor& x) {
         const Tensor a = quantize_fp8(x, one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
         const Tensor b = quantize_fp8(x.t(), one, DType::kF8E4M3, Fp8Overflow::kSaturate).data;
         return std::vector<Tensor>{scaled_mm(a, b, one, one, DType::kF32)};
       }},
      {&ops::quantize_blocks,
       "not differentiable: block-scaled FP8/FP4 bits and their scales (fp8_linear's block-scaled path owns the "
       "gradients)",
       [](const Tensor& x) {
         const BlockQuantized q = quantize_blocks(x, {.block_cols = 2});
         return std::vector<Tensor>{q.data, q.scale_inv, q.amax, q.overflow, q.underflow};
       }},
      {&ops::hadamard16, "not differentiable: a rotation applied to the weight gradient's operands inside a backward",
       [](const Tensor& x) { return std::vector<Tensor>{hadamard16(x, hadamard16_signs(1))}; }},
      {&ops::block_scaled_mm,
       "not differentiable: FP8 operands (fp8_linear's block-scaled path computes its gradients with it too)",
       [](const Tensor& x) {
         const BlockQuantized a = quantize_blocks(x, {.block_cols = 2}), b = quantize_blocks(x, {.block_cols = 2});
         return std::vector<Tensor>{block_scaled_mm(a.data, b.data.t(), a.scale_inv, b.scale_inv.t(), {.block_k = 2})};
       }},
  };
}

TEST(GradgradcheckCoverage, EveryRegisteredOpHasACaseOrAnExemption) {
  std::vector<std::string_view> covered;
  for (const Case& c : all_cases()) covered.push_back(registered_op_of(c.name));
  const std::vector<Exemption> exempt = exemptions();
  for (const OpInfo* op : all_ops()) {
    const bool has_case = std::ranges::find(covered, op->name) != covered.end();
    const bool is_exempt = std::ranges::any_of(exempt, [op](const Exemption& e) { return e.op == op; });
    EXPECT_TRUE(has_case || is_exempt)
        << "ops::" << op->name << " is registered (ops/op_registry.cc) but has no second-derivative case. HINT: add "
        << "a case named \"" << op->name << "\" (or \"" << op->name << "_<variant>\") to this file's lists; if "
        << "the op is not differentiable, add it to exemptions() with the reason";
    EXPECT_FALSE(has_case && is_exempt) << "ops::" << op->name << " has a case and an exemption: drop the exemption";
  }
}

TEST(GradgradcheckCoverage, ExemptOpsAreRegisteredAndTheirResultsCarryNoHistory) {
  const Tensor x = from_vector<float>({0.5f, -1.0f, 2.0f, 3.0f, -0.25f, 1.5f}, {2, 3}).set_requires_grad(true);
  for (const Exemption& e : exemptions()) {
    EXPECT_NE(std::ranges::find(all_ops(), e.op), all_ops().end()) << e.op->name << " is not in all_ops()";
    EXPECT_FALSE(e.why.empty()) << e.op->name;
    for (const Tensor& r : e.results(x)) {
      EXPECT_FALSE(r.requires_grad()) << "ops::" << e.op->name << " is exempt as " << e.why
                                      << ", yet a result carries history: give it a case instead";
    }
  }
}

// The rule itself: a new op named like an existing op's variant is not taken for covered by it.
TEST(GradgradcheckCoverage, CasesBelongToTheLongestFittingOpName) {
  EXPECT_EQ(registered_op_of("log_softmax_middle"), "log_softmax");
  EXPECT_EQ(registered_op_of("log"), "log");
  EXPECT_EQ(registered_op_of("logsumexp_all"), "logsumexp");
  EXPECT_EQ(registered_op_of("norm_2"), "norm");
  EXPECT_EQ(registered_op_of("layer_norm_two_dims_no_affine"), "layer_norm");
  EXPECT_EQ(registered_op_of("binary_cross_entropy_with_logits_none"), "binary_cross_entropy_with_logits");
  EXPECT_EQ(registered_op_of("normalize_like"), "");  // a prefix without '_' after it is not a fit
  EXPECT_EQ(registered_op_of("mul"), "");             // no descriptor
}

}  // namespace
}  // namespace mantissa::testing
