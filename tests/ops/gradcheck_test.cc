// Every differentiable op through the one gradcheck harness (f64 central differences), with broadcasting and,
// by the harness's default, contiguous, transposed and strided inputs.
#include "tests/support/gradcheck.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/generator.h"
#include "ops/conv/conv.h"
#include "ops/dropout/dropout.h"
#include "ops/elementwise/elementwise.h"
#include "ops/embedding/embedding.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/pool/pool.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"

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
// Inputs kept at least 0.05 from zero: relu, abs and clamp have kinks there, log/sqrt/rsqrt need x > 0.
constexpr RandomInputOptions kAwayFromZero{.low = -2.0, .high = 2.0, .min_abs = 0.05};
constexpr RandomInputOptions kPositive{.low = 0.2, .high = 2.5};

std::vector<Case> elementwise_cases() {
  return {
      {"add", [](const In& x) { return add(x[0], x[1]); }, {rnd({3, 4}, 1), rnd({3, 4}, 2)}},
      {"add_broadcast", [](const In& x) { return x[0] + x[1]; }, {rnd({3, 1, 5}, 3), rnd({4, 5}, 4)}},
      {"add_scalar", [](const In& x) { return add(x[0], 2.5); }, {rnd({3, 4}, 5)}},
      {"sub_broadcast", [](const In& x) { return sub(x[0], x[1]); }, {rnd({4, 1}, 6), rnd({3}, 7)}},
      {"sub_scalar_both_sides", [](const In& x) { return 1.5 - (x[0] - 0.5); }, {rnd({2, 3}, 8)}},
      {"mul", [](const In& x) { return mul(x[0], x[1]); }, {rnd({3, 4}, 9), rnd({3, 4}, 10)}},
      {"mul_broadcast", [](const In& x) { return x[0] * x[1]; }, {rnd({3, 4, 5}, 11), rnd({5}, 12)}},
      {"mul_scalar", [](const In& x) { return mul(x[0], -3.0); }, {rnd({3, 4}, 13)}},
      {"div", [](const In& x) { return div(x[0], x[1]); }, {rnd({3, 4}, 14), rnd({3, 4}, 15, kAwayFromZero)}},
      {"div_broadcast", [](const In& x) { return x[0] / x[1]; }, {rnd({2, 1, 3}, 16), rnd({4, 1}, 17, kPositive)}},
      {"div_scalar", [](const In& x) { return div(x[0], 4.0); }, {rnd({3, 4}, 18)}},
      {"neg", [](const In& x) { return neg(x[0]); }, {rnd({3, 4}, 19)}},
      {"pow_tensor", [](const In& x) { return pow(x[0], x[1]); }, {rnd({3, 4}, 20, kPositive), rnd({4}, 21)}},
      {"pow_scalar_2", [](const In& x) { return pow(x[0], 2.0); }, {rnd({3, 4}, 22)}},
      {"pow_scalar_3", [](const In& x) { return pow(x[0], 3.0); }, {rnd({3, 4}, 23)}},
      {"pow_scalar_fractional", [](const In& x) { return pow(x[0], -1.5); }, {rnd({3, 4}, 24, kPositive)}},
      {"pow_scalar_0", [](const In& x) { return pow(x[0], 0.0); }, {rnd({3, 4}, 25)}},
      {"exp", [](const In& x) { return exp(x[0]); }, {rnd({3, 4}, 26)}},
      {"log", [](const In& x) { return log(x[0]); }, {rnd({3, 4}, 27, kPositive)}},
      {"sqrt", [](const In& x) { return sqrt(x[0]); }, {rnd({3, 4}, 28, kPositive)}},
      {"rsqrt", [](const In& x) { return rsqrt(x[0]); }, {rnd({3, 4}, 29, kPositive)}},
      {"abs", [](const In& x) { return abs(x[0]); }, {rnd({3, 4}, 30, kAwayFromZero)}},
      {"relu", [](const In& x) { return relu(x[0]); }, {rnd({3, 4}, 31, kAwayFromZero)}},
      {"gelu_erf", [](const In& x) { return gelu(x[0]); }, {rnd({3, 4}, 32, {.low = -4, .high = 4})}},
      {"gelu_tanh",
       [](const In& x) { return gelu(x[0], GeluApproximation::kTanh); },
       {rnd({3, 4}, 33, {.low = -4, .high = 4})}},
      {"tanh", [](const In& x) { return tanh(x[0]); }, {rnd({3, 4}, 34)}},
      {"sigmoid", [](const In& x) { return sigmoid(x[0]); }, {rnd({3, 4}, 35, {.low = -5, .high = 5})}},
      {"silu", [](const In& x) { return silu(x[0]); }, {rnd({3, 4}, 901, {.low = -5, .high = 5})}},
      // Random inputs land within eps of a clamp bound with probability ~1e-6 per element.
      {"clamp_both", [](const In& x) { return clamp(x[0], -0.5, 0.7); }, {rnd({4, 5}, 36)}},
      {"clamp_min", [](const In& x) { return clamp(x[0], 0.3, std::nullopt); }, {rnd({4, 5}, 37)}},
      {"clamp_max", [](const In& x) { return clamp(x[0], std::nullopt, -0.2); }, {rnd({4, 5}, 38)}},
      {"where_broadcast",
       [](const In& x) { return where(x[0], x[1], x[2]); },
       {gt(rnd({3, 1}, 39), 0.0), rnd({3, 4}, 40), rnd({4}, 41)}},
      {"where_same_input",
       [](const In& x) { return where(gt(x[0], 0.0), x[0] * x[0], neg(x[0])); },
       {rnd({3, 4}, 42, kAwayFromZero)}},
      {"masked_fill_broadcast",
       [](const In& x) { return masked_fill(x[0], x[1], -7.0); },
       {rnd({3, 4}, 43), gt(rnd({4}, 44), 0.0)}},
  };
}

std::vector<Case> reduce_cases() {
  return {
      {"sum_all", [](const In& x) { return sum(x[0]); }, {rnd({3, 4, 5}, 50)}},
      {"sum_dims",
       [](const In& x) {
         return sum(x[0], {0, 2});
       },
       {rnd({3, 4, 5}, 51)}},
      {"sum_dim_keepdim", [](const In& x) { return sum(x[0], {-1}, KeepDim::kYes); }, {rnd({3, 4, 5}, 52)}},
      {"mean_all", [](const In& x) { return mean(x[0]); }, {rnd({3, 4, 5}, 53)}},
      {"mean_dim", [](const In& x) { return mean(x[0], {1}); }, {rnd({3, 4, 5}, 54)}},
      {"var_all", [](const In& x) { return var(x[0]); }, {rnd({4, 5}, 55)}},
      {"var_dim_unbiased", [](const In& x) { return var(x[0], {1}); }, {rnd({3, 4, 5}, 56)}},
      {"var_dims_biased_keepdim",
       [](const In& x) {
         return var(x[0], {0, 2}, {.correction = 0, .keepdim = KeepDim::kYes});
       },
       {rnd({3, 4, 5}, 57)}},
      // Random values are distinct, so max is differentiable at them.
      {"max_dim", [](const In& x) { return max(x[0], 1).values; }, {rnd({3, 4, 5}, 58)}},
      {"max_dim_keepdim", [](const In& x) { return max(x[0], -1, KeepDim::kYes).values; }, {rnd({3, 4, 5}, 59)}},
      {"max_all", [](const In& x) { return max(x[0]); }, {rnd({3, 4}, 60)}},
  };
}

std::vector<Case> view_cases() {
  return {
      {"reshape",
       [](const In& x) {
         return x[0].reshape({4, -1});
       },
       {rnd({2, 3, 4}, 70)}},
      // Splitting the first dim is a valid view of every layout the harness makes.
      {"view_split_first_dim",
       [](const In& x) {
         return x[0].view({2, 3, 4});
       },
       {rnd({6, 4}, 71)}},
      {"transpose", [](const In& x) { return x[0].transpose(0, 2) * x[1]; }, {rnd({2, 3, 4}, 72), rnd({4, 3, 2}, 73)}},
      {"t", [](const In& x) { return x[0].t(); }, {rnd({3, 5}, 74)}},
      {"permute",
       [](const In& x) {
         return x[0].permute({2, 0, 1});
       },
       {rnd({2, 3, 4}, 75)}},
      {"slice_step", [](const In& x) { return x[0].slice(1, 1, 6, 2); }, {rnd({3, 7}, 76)}},
      {"slice_negative", [](const In& x) { return x[0].slice(-1, -3, -1); }, {rnd({3, 7}, 77)}},
      {"narrow", [](const In& x) { return x[0].narrow(0, 1, 2); }, {rnd({4, 3}, 78)}},
      {"select", [](const In& x) { return x[0].select(1, -1); }, {rnd({3, 4, 2}, 79)}},
      {"expand",
       [](const In& x) {
         return x[0].expand({2, 3, 4}) * x[1];
       },
       {rnd({3, 1}, 80), rnd({2, 3, 4}, 81)}},
      {"squeeze_all", [](const In& x) { return x[0].squeeze(); }, {rnd({3, 1, 4, 1}, 82)}},
      {"squeeze_dim", [](const In& x) { return x[0].squeeze(1); }, {rnd({3, 1, 4}, 83)}},
      {"unsqueeze", [](const In& x) { return x[0].unsqueeze(0).unsqueeze(-1); }, {rnd({3, 4}, 84)}},
      {"flatten", [](const In& x) { return x[0].flatten(1, 2); }, {rnd({2, 3, 4, 2}, 85)}},
      {"contiguous", [](const In& x) { return x[0].contiguous(); }, {rnd({3, 4}, 86)}},
      {"clone", [](const In& x) { return x[0].clone() * 2.0; }, {rnd({3, 4}, 87)}},
      {"to_f64_identity", [](const In& x) { return x[0].to(DType::kF64); }, {rnd({3, 4}, 88)}},
      // Through f32 and back: a linear map, so a large eps has no truncation error; each of x +- eps is
      // rounded to f32 (half an ulp, <= 1.2e-7 at |x| < 2), giving at most 1.2e-7 / 0.02 = 6e-6 of error
      // per element. atol 1e-4 with eps 1e-2 bounds that with room.
      {"to_f32_and_back",
       [](const In& x) { return x[0].to(DType::kF32).to(DType::kF64); },
       {rnd({3, 4}, 89)},
       {.eps = 1e-2, .atol = 1e-4}},
  };
}

// Layers: convolution, pooling and normalization. Random inputs are distinct, so max pooling is
// differentiable at them.
std::vector<Case> layer_cases() {
  return {
      {"conv2d",
       [](const In& x) { return conv2d(x[0], x[1], x[2]); },
       {rnd({2, 3, 5, 6}, 100), rnd({4, 3, 3, 3}, 101), rnd({4}, 102)}},
      {"conv2d_stride1_pad1",
       [](const In& x) {
         return conv2d(x[0], x[1], x[2], {.padding = {1, 1}});
       },
       {rnd({2, 3, 5, 4}, 103), rnd({4, 3, 3, 3}, 104), rnd({4}, 105)}},
      {"conv2d_stride2_no_bias",
       [](const In& x) {
         return conv2d(x[0], x[1], Tensor(), {.stride = {2, 2}});
       },
       {rnd({1, 2, 7, 6}, 106), rnd({3, 2, 3, 2}, 107)}},
      {"conv2d_dilation_asymmetric",
       [](const In& x) {
         return conv2d(x[0], x[1], x[2], {.stride = {1, 2}, .padding = {2, 0}, .dilation = {2, 1}});
       },
       {rnd({1, 2, 6, 7}, 108), rnd({2, 2, 3, 3}, 109), rnd({2}, 110)}},
      {"conv2d_groups",
       [](const In& x) {
         return conv2d(x[0], x[1], x[2], {.padding = {1, 1}, .groups = 2});
       },
       {rnd({2, 4, 4, 4}, 111), rnd({6, 2, 3, 3}, 112), rnd({6}, 113)}},
      {"conv2d_unbatched",
       [](const In& x) { return conv2d(x[0], x[1]); },
       {rnd({2, 4, 4}, 114), rnd({3, 2, 2, 2}, 115)}},
      {"max_pool2d", [](const In& x) { return max_pool2d(x[0], {}); }, {rnd({2, 3, 4, 6}, 120)}},
      {"max_pool2d_k3_s2_pad1",
       [](const In& x) {
         return max_pool2d(x[0], {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
       },
       {rnd({1, 2, 5, 6}, 121)}},
      {"avg_pool2d", [](const In& x) { return avg_pool2d(x[0], {}); }, {rnd({2, 3, 4, 6}, 122)}},
      {"avg_pool2d_k3_s2_pad1",
       [](const In& x) {
         return avg_pool2d(x[0], {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
       },
       {rnd({1, 2, 5, 6}, 123)}},
      {"avg_pool2d_overlapping_unbatched",
       [](const In& x) {
         return avg_pool2d(x[0], {.stride = {1, 1}});
       },
       {rnd({2, 4, 5}, 124)}},
      {"layer_norm",
       [](const In& x) { return layer_norm(x[0], {5}, x[1], x[2]); },
       {rnd({3, 4, 5}, 130), rnd({5}, 131), rnd({5}, 132)}},
      {"layer_norm_two_dims_no_affine",
       [](const In& x) {
         return layer_norm(x[0], {3, 4});
       },
       {rnd({2, 3, 4}, 133)}},
      {"batch_norm_train",
       [](const In& x) {
         const Tensor rm = zeros({3}, {.dtype = DType::kF64}), rv = ones({3}, {.dtype = DType::kF64});
         return batch_norm(x[0], rm, rv, x[1], x[2], BatchNormMode::kTrain);
       },
       {rnd({4, 3, 2, 2}, 134), rnd({3}, 135), rnd({3}, 136)}},
      {"batch_norm_train_2d_no_stats",
       [](const In& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], BatchNormMode::kTrain); },
       {rnd({5, 3}, 137), rnd({3}, 138), rnd({3}, 139)}},
      {"batch_norm_eval",
       [](const In& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4], BatchNormMode::kEval); },
       {rnd({4, 3, 2, 2}, 140), rnd({3}, 141), rnd({3}, 142, kPositive), rnd({3}, 143), rnd({3}, 144)},
       {.differentiate = {true, false, false, true, true}}},
  };
}

Tensor i64(std::vector<int64_t> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return from_vector<int64_t>(v, shape);
}

// Softmax, losses, embedding, dropout and the shape ops that build tensors from pieces or indices.
std::vector<Case> nn_cases() {
  return {
      {"softmax_last", [](const In& x) { return softmax(x[0], -1); }, {rnd({3, 5}, 150, {.low = -4, .high = 4})}},
      {"softmax_dim0", [](const In& x) { return softmax(x[0], 0); }, {rnd({4, 3, 2}, 151)}},
      {"log_softmax_last",
       [](const In& x) { return log_softmax(x[0], -1); },
       {rnd({3, 5}, 152, {.low = -4, .high = 4})}},
      {"log_softmax_middle", [](const In& x) { return log_softmax(x[0], 1); }, {rnd({2, 4, 3}, 153)}},
      {"cross_entropy_mean",
       [](const In& x) { return cross_entropy(x[0], x[1]); },
       {rnd({4, 5}, 154), i64({1, 0, 4, 4})}},
      {"cross_entropy_sum_ignore_index",
       [](const In& x) { return cross_entropy(x[0], x[1], {.reduction = Reduction::kSum, .ignore_index = 2}); },
       {rnd({5, 3}, 155), i64({0, 2, 1, 2, 1})}},
      {"cross_entropy_none_spatial",
       [](const In& x) { return cross_entropy(x[0], x[1], {.reduction = Reduction::kNone}); },
       {rnd({2, 3, 2, 2}, 156), i64({0, 1, 2, 2, 1, 1, 0, 0}, {2, 2, 2})}},
      {"nll_loss_mean_ignore_index",
       [](const In& x) { return nll_loss(x[0], x[1], {.ignore_index = 0}); },
       {rnd({4, 3}, 157), i64({0, 2, 1, 2})}},
      {"mse_loss_mean", [](const In& x) { return mse_loss(x[0], x[1]); }, {rnd({3, 4}, 158), rnd({3, 4}, 159)}},
      {"mse_loss_sum",
       [](const In& x) { return mse_loss(x[0], x[1], Reduction::kSum); },
       {rnd({5}, 160), rnd({5}, 161)}},
      {"mse_loss_none",
       [](const In& x) { return mse_loss(x[0], x[1], Reduction::kNone); },
       {rnd({2, 3}, 162), rnd({2, 3}, 163)}},
      {"embedding_repeated_indices",
       [](const In& x) { return embedding(x[0], x[1]); },
       {rnd({5, 3}, 164), i64({4, 0, 4, 2, 4, 1}, {2, 3})}},
      // A fresh generator with a fixed seed on every call: the same mask for every evaluation.
      {"dropout",
       [](const In& x) {
         Generator g(9);
         return dropout(x[0], 0.4, &g);
       },
       {rnd({4, 5}, 165)}},
      {"cat",
       [](const In& x) {
         return cat({x[0], x[1], x[2]}, 1);
       },
       {rnd({2, 3}, 166), rnd({2, 1}, 167), rnd({2, 4}, 168)}},
      {"cat_negative_dim",
       [](const In& x) {
         return cat({x[0], x[1]}, -3);
       },
       {rnd({1, 2, 3}, 169), rnd({2, 2, 3}, 170)}},
      {"stack",
       [](const In& x) {
         return stack({x[0], x[1]}, 1);
       },
       {rnd({3, 2}, 171), rnd({3, 2}, 172)}},
      {"split_sizes",
       [](const In& x) {
         const std::vector<Tensor> parts = split(x[0], std::vector<int64_t>{1, 3, 2}, 1);
         return cat({parts[2] * 3.0, parts[0], exp(parts[1])}, 1);
       },
       {rnd({2, 6}, 173)}},
      {"split_chunks",
       [](const In& x) {
         const std::vector<Tensor> parts = split(x[0], 2, 0);  // sizes 2, 2, 1
         return parts[0] * parts[1] + parts[2];
       },
       {rnd({5, 3}, 174)}},
      {"index_select_repeated",
       [](const In& x) { return index_select(x[0], 1, x[1]); },
       {rnd({3, 4}, 175), i64({3, 0, 3, 1, 3})}},
      {"gather",
       [](const In& x) { return gather(x[0], 1, x[1]); },
       {rnd({3, 4}, 176), i64({0, 3, 3, 1, 2, 2, 0, 0, 1}, {3, 3})}},
      {"gather_dim0", [](const In& x) { return gather(x[0], 0, x[1]); }, {rnd({3, 2}, 177), i64({2, 0, 2, 2}, {2, 2})}},
  };
}

std::vector<Case> matmul_cases() {
  return {
      {"mm", [](const In& x) { return mm(x[0], x[1]); }, {rnd({3, 4}, 200), rnd({4, 5}, 201)}},
      {"bmm", [](const In& x) { return bmm(x[0], x[1]); }, {rnd({2, 3, 4}, 202), rnd({2, 4, 2}, 203)}},
      {"matmul_dot", [](const In& x) { return matmul(x[0], x[1]); }, {rnd({4}, 204), rnd({4}, 205)}},
      {"matmul_vector_matrix", [](const In& x) { return matmul(x[0], x[1]); }, {rnd({4}, 206), rnd({4, 3}, 207)}},
      {"matmul_matrix_vector", [](const In& x) { return matmul(x[0], x[1]); }, {rnd({3, 4}, 208), rnd({4}, 209)}},
      {"matmul_batched_vector", [](const In& x) { return matmul(x[0], x[1]); }, {rnd({2, 3, 4}, 210), rnd({4}, 211)}},
      {"matmul_broadcast_batch",
       [](const In& x) { return matmul(x[0], x[1]); },
       {rnd({2, 1, 3, 4}, 212), rnd({3, 4, 2}, 213)}},
      {"matmul_matrix_batched",
       [](const In& x) { return matmul(x[0], x[1]); },
       {rnd({3, 4}, 214), rnd({2, 4, 5}, 215)}},
      {"linear",
       [](const In& x) { return linear(x[0], x[1], x[2]); },
       {rnd({5, 4}, 216), rnd({3, 4}, 217), rnd({3}, 218)}},
      {"linear_3d_no_bias", [](const In& x) { return linear(x[0], x[1]); }, {rnd({2, 3, 4}, 219), rnd({5, 4}, 220)}},
      {"addmm_broadcast_bias",
       [](const In& x) { return addmm(x[0], x[1], x[2], 0.5, -2.0); },
       {rnd({5}, 221), rnd({3, 4}, 222), rnd({4, 5}, 223)}},
      {"baddbmm",
       [](const In& x) { return baddbmm(x[0], x[1], x[2], 2.0, 0.5); },
       {rnd({2, 3, 2}, 224), rnd({2, 3, 4}, 225), rnd({2, 4, 2}, 226)}},
  };
}

// Compositions: shared inputs, views feeding math, several paths into one leaf.
std::vector<Case> composite_cases() {
  return {
      {"shared_input", [](const In& x) { return x[0] * x[0] + exp(x[0]) * x[0]; }, {rnd({3, 4}, 90)}},
      {"mlp_like",
       [](const In& x) { return mean(tanh(sum(x[0].unsqueeze(1) * x[1], {2}) + x[2]), {1}); },
       {rnd({4, 5}, 91), rnd({3, 5}, 92), rnd({3}, 93)}},
      {"normalize_like",
       [](const In& x) {
         const Tensor m = mean(x[0], {-1}, KeepDim::kYes);
         return (x[0] - m) * rsqrt(var(x[0], {-1}, {.correction = 0, .keepdim = KeepDim::kYes}) + 1e-5);
       },
       {rnd({3, 6}, 94)}},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto* group :
       {&elementwise_cases, &reduce_cases, &view_cases, &layer_cases, &nn_cases, &matmul_cases, &composite_cases}) {
    for (Case& c : (*group)()) all.push_back(std::move(c));
  }
  return all;
}

class GradcheckOp : public ::testing::TestWithParam<Case> {};

TEST_P(GradcheckOp, MatchesCentralDifferences) {
  const Case& c = GetParam();
  EXPECT_TRUE(gradcheck(c.fn, c.inputs, c.options)) << c.name;
}

INSTANTIATE_TEST_SUITE_P(All, GradcheckOp, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- the harness itself must catch wrong gradients and name where ----

// y = 3x with a backward that returns 2g: every element is wrong.
struct WrongScaleBackward final : Node {
  std::string_view name() const override { return "WrongScaleBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override { return {mul(g[0], 2.0)}; }
};
Tensor wrong_scale(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, 3.0);
  }
  if (compute_requires_grad({&x})) set_history(out, make_node<WrongScaleBackward>({&x}));
  return out;
}

TEST(Gradcheck, ReportsWrongGradientWithInputAndElement) {
  const auto r = gradcheck([](const In& x) { return x[0] + wrong_scale(x[1]); }, {rnd({2, 3}, 1), rnd({2, 3}, 2)},
                           {.layouts = {InputLayout::kContiguous}});
  ASSERT_FALSE(r);
  const std::string msg = r.message();
  EXPECT_NE(msg.find("6 gradient element(s) disagree"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input 1 [2, 3] (contiguous), element [0, 0]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("input 0"), std::string::npos) << "input 0's gradient is right: " << msg;
}

TEST(Gradcheck, ReportsInputsNoGradientReaches) {
  // x[1] enters only through a detach(): its true derivative is non-zero, but no gradient flows.
  const auto r = gradcheck([](const In& x) { return x[0] * x[1].detach(); }, {rnd({3}, 3), rnd({3}, 4)},
                           {.layouts = {InputLayout::kStrided}});
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("input 1 [3] (strided)"), std::string::npos) << r.message();
  EXPECT_NE(std::string(r.message()).find("no gradient reached this input"), std::string::npos) << r.message();
}

TEST(Gradcheck, NonContiguousLayoutsReallyAreNonContiguous) {
  std::vector<bool> contiguous_seen;
  auto fn = [&](const In& x) {
    contiguous_seen.push_back(x[0].is_contiguous());
    return x[0] * 1.0;
  };
  ASSERT_TRUE(gradcheck(fn, {rnd({2, 3}, 5)}, {.layouts = {InputLayout::kTransposed}}));
  ASSERT_FALSE(contiguous_seen.empty());
  EXPECT_FALSE(contiguous_seen[0]);
  contiguous_seen.clear();
  ASSERT_TRUE(gradcheck(fn, {rnd({2, 3}, 5)}, {.layouts = {InputLayout::kStrided}}));
  EXPECT_FALSE(contiguous_seen[0]);
}

TEST(Gradcheck, RejectsNonF64Inputs) {
  const auto r = gradcheck([](const In& x) { return x[0]; }, {rnd({2}, 6).to(DType::kF32)});
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("must be f64"), std::string::npos);
}

}  // namespace
}  // namespace mantissa::testing
