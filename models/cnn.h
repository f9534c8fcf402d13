// CNN for 28x28 single-channel images (Fashion-MNIST): two conv blocks and two Linear layers.
//   [N,1,28,28] conv1 3x3 -> [N,32,26,26] bn1 relu pool 2 -> [N,32,13,13]
//   conv2 3x3 -> [N,64,11,11] bn2 relu pool 2 -> [N,64,5,5] flatten -> [N,1600]
//   fc1 1600->128 relu, fc2 128->10 (logits)
// No padding; pooling floors 11/2 to 5, hence 64*5*5 = 1600. Parameter names follow a PyTorch module
// with attributes conv1, bn1, conv2, bn2, fc1, fc2 ("conv1.weight", "bn1.running_mean", "fc2.bias").
// train()/eval() switch the batch norms between batch and running statistics.
#pragma once

#include <memory>

#include "framework/generator.h"
#include "framework/module.h"
#include "models/layers/conv.h"
#include "models/layers/linear.h"
#include "models/layers/norm.h"

namespace mantissa {

struct CNNOptions {
  int64_t num_classes = 10;
  DType dtype = DType::kF32;       // of the master parameters
  Generator* generator = nullptr;  // for the initial values; default_generator() when null
};

class CNN : public Module {
 public:
  explicit CNN(CNNOptions options = {});
  std::string type_name() const override { return "CNN"; }
  // x [N, 1, 28, 28] -> logits [N, num_classes]
  Tensor forward(const Tensor& x);

  static constexpr int64_t kImageSize = 28;
  static constexpr int64_t kFlatFeatures = 64 * 5 * 5;  // 1600

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Linear> fc1, fc2;

 private:
  Tensor forward_unhooked(const Tensor& x);  // forward without the hooks around it
};

}  // namespace mantissa
