// Flatten: merges dims start_dim..end_dim (by default all but the batch dim), as torch.nn.Flatten.
#pragma once

#include "framework/module.h"

namespace mantissa {

struct FlattenOptions {
  int64_t start_dim = 1;
  int64_t end_dim = -1;
};

class Flatten : public Module {
 public:
  explicit Flatten(FlattenOptions options = {}) : options_(options) {}
  std::string type_name() const override { return "Flatten"; }
  // [B, C, H, W] -> [B, C*H*W] with the defaults; a view when the strides allow.
  Tensor forward(const Tensor& x);

 private:
  FlattenOptions options_;
};

}  // namespace mantissa
