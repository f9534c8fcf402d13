// CNN: conv-bn-relu-pool twice (computed as conv-bn-pool-relu, the same function), then two Linear
// layers (shapes in cnn.h).
#include "models/cnn.h"

#include "framework/error.h"
#include "models/layers/conv_bn.h"
#include "ops/elementwise/elementwise.h"
#include "ops/pool/pool.h"

namespace mantissa {

CNN::CNN(CNNOptions options) {
  MT_CHECK(options.num_classes > 0, "CNN: num_classes must be positive, got ", options.num_classes);
  const Conv2dLayerOptions conv{.dtype = options.dtype, .generator = options.generator};
  const LinearOptions lin{.dtype = options.dtype, .generator = options.generator};
  const BatchNormOptions bn{.dtype = options.dtype};
  conv1 = register_module("conv1", std::make_shared<Conv2d>(1, 32, std::array<int64_t, 2>{3, 3}, conv));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(32, bn));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(32, 64, std::array<int64_t, 2>{3, 3}, conv));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(64, bn));
  fc1 = register_module("fc1", std::make_shared<Linear>(kFlatFeatures, 128, lin));
  fc2 = register_module("fc2", std::make_shared<Linear>(128, options.num_classes, lin));
}

Tensor CNN::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) { return forward_unhooked(in); });
}

Tensor CNN::forward_unhooked(const Tensor& x) {
  MT_CHECK(x.dim() == 4 && x.size(1) == 1 && x.size(2) == kImageSize && x.size(3) == kImageSize,
           "CNN: expected images [N, 1, 28, 28], got ", shape_str(x.shape()),
           ". HINT: reshape flat 784-pixel rows with x.reshape({N, 1, 28, 28})");
  // ReLU after the max-pool: relu(max(a, b)) = max(relu(a), relu(b)) and the gradients agree (the pool's
  // argmax is the same wherever the maximum is positive, and the gradient is zero elsewhere either way),
  // but the ReLU then touches a quarter of the values (a NaN passes both, so it wins either way). In
  // training, batch norm, pool and ReLU
  // are one op (BatchNorm2d::forward_relu_pool2d); in eval mode the batch norm folds into the convolution
  // (models/layers/conv_bn.h) instead.
  const Pool2dOptions pool{.kernel_size = {2, 2}};
  const auto block = [&pool](Conv2d& conv, BatchNorm2d& bn, const Tensor& in) {
    if (can_fold_batch_norm(conv, bn)) return relu(max_pool2d(conv2d_batch_norm_eval(conv, bn, in), pool));
    return bn.forward_relu_pool2d(conv.forward(in));
  };
  Tensor h = block(*conv1, *bn1, x);          // [N, 32, 13, 13]
  h = block(*conv2, *bn2, h);                 // [N, 64, 5, 5]
  h = h.reshape({h.size(0), kFlatFeatures});  // [N, 1600]
  return fc2->forward(relu(fc1->forward(h)));
}

}  // namespace mantissa
