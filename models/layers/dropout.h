// Dropout layer: zeroes elements in training mode only, as torch.nn.Dropout. No parameters.
#pragma once

#include "framework/generator.h"
#include "framework/module.h"

namespace mantissa {

struct DropoutOptions {
  double p = 0.5;                  // probability of zeroing an element
  Generator* generator = nullptr;  // for the masks; default_generator() when null
};

class Dropout : public Module {
 public:
  explicit Dropout(DropoutOptions options = {});
  std::string type_name() const override { return "Dropout"; }
  // Training: zeroes elements with probability p and scales the rest by 1/(1-p). Eval: x itself.
  Tensor forward(const Tensor& x);

 private:
  DropoutOptions options_;
};

}  // namespace mantissa
