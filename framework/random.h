// Random factories and in-place fills from a Generator (default_generator() when none is given).
// Values are drawn in row-major order of the tensor's shape, so the same seed gives the same tensor
// whatever its strides. 16-bit dtypes draw in f32 and round once.
#pragma once

#include "framework/generator.h"
#include "framework/tensor.h"

namespace mantissa {

// Uniform on [0, 1).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
// Standard normal.
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
// Fills `t` with values uniform on [low, high), even after rounding to a 16-bit dtype.
void uniform_(const Tensor& t, double low, double high, Generator* generator = nullptr);
// Fills `t` with values from N(mean, stddev^2).
void normal_(const Tensor& t, double mean, double stddev, Generator* generator = nullptr);

}  // namespace mantissa
