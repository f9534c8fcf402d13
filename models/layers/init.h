// PyTorch's default initialisations for layer parameters, drawn from a Generator
// (default_generator() when none is given), so a seed reproduces a model.
#pragma once

#include <cstdint>

#include "framework/generator.h"
#include "framework/tensor.h"

namespace mantissa {

// Linear and Conv2d: kaiming_uniform_(a = sqrt(5)) for the weight, whose bound
// gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + a^2)) = sqrt(1/3) is exactly 1 / sqrt(fan_in);
// the bias uses the same bound. fan_in = in_features, or in_channels / groups * kH * kW.
// A new leaf of `shape` and `dtype` drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (zeros when fan_in is 0).
Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, DType dtype, Generator* generator);

// Embedding: N(0, 1).
Tensor standard_normal(const Shape& shape, DType dtype, Generator* generator);

}  // namespace mantissa
