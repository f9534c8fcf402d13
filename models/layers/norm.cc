// BatchNorm2d and LayerNorm layers over ops/norm/norm.h (a synchronized BatchNorm2d over sync_batch_norm.h).
#include "models/layers/norm.h"

#include "framework/autograd.h"
#include "framework/error.h"
#include "models/layers/sync_batch_norm.h"
#include "ops/elementwise/elementwise.h"
#include "ops/norm/norm.h"
#include "ops/pool/pool.h"

namespace mantissa {

BatchNorm2d::BatchNorm2d(int64_t c, BatchNormOptions opts) : num_features(c), options(opts) {
  MT_CHECK(c > 0, "BatchNorm2d: num_features must be positive, got ", c);
  if (opts.affine) {
    weight = register_parameter("weight", ones({c}, {.dtype = opts.dtype}));
    bias = register_parameter("bias", zeros({c}, {.dtype = opts.dtype}));
  }
  running_mean = register_buffer("running_mean", zeros({c}, {.dtype = opts.dtype}));
  running_var = register_buffer("running_var", ones({c}, {.dtype = opts.dtype}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::kI64}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) { return forward_unhooked(in); });
}

Tensor BatchNorm2d::forward_unhooked(const Tensor& x) {
  MT_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d: expected an input [N, ", num_features,
           ", H, W], got ", shape_str(x.shape()));
  if (!is_training()) {
    return batch_norm(x, running_mean, running_var, weight, bias, BatchNormMode::kEval, options.momentum, options.eps);
  }
  count_batch();
  if (options.process_group != nullptr) {
    return sync_batch_norm(x, running_mean, running_var, weight, bias, *options.process_group, options.momentum,
                           options.eps);
  }
  return batch_norm(x, running_mean, running_var, weight, bias, BatchNormMode::kTrain, options.momentum, options.eps);
}

void BatchNorm2d::count_batch() {
  // A counter only: the momentum is fixed. On a GPU the add runs there (no host synchronization per step).
  if (num_batches_tracked.device().is_cpu()) {
    num_batches_tracked.data<int64_t>()[0] += 1;
  } else {
    accumulate_(num_batches_tracked, ones({}, {.dtype = DType::kI64, .device = num_batches_tracked.device()}));
  }
}

Tensor BatchNorm2d::forward_relu_pool2d(const Tensor& x) {
  if (has_hooks() || options.process_group != nullptr) {
    return relu(max_pool2d(forward(x), {.kernel_size = {2, 2}}));
  }
  MT_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d: expected an input [N, ", num_features,
           ", H, W], got ", shape_str(x.shape()));
  if (is_training()) count_batch();
  return batch_norm_relu_pool2d(x, running_mean, running_var, weight, bias,
                                is_training() ? BatchNormMode::kTrain : BatchNormMode::kEval, options.momentum,
                                options.eps);
}

LayerNorm::LayerNorm(Shape shape, LayerNormOptions opts) : normalized_shape(std::move(shape)), options(opts) {
  MT_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape is empty. HINT: pass the trailing dims, e.g. {C}");
  if (opts.elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape, {.dtype = opts.dtype}));
    bias = register_parameter("bias", zeros(normalized_shape, {.dtype = opts.dtype}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return call_hooked(x,
                     [this](const Tensor& in) { return layer_norm(in, normalized_shape, weight, bias, options.eps); });
}

AddLayerNorm LayerNorm::forward_add(const Tensor& x, const Tensor& delta) {
  if (has_hooks()) {
    const Tensor sum = x + delta;
    return {sum, forward(sum)};
  }
  return add_layer_norm(x, delta, normalized_shape, weight, bias, options.eps);
}

}  // namespace mantissa
