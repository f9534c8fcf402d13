// embedding: rows of a [V, D] weight picked by integer indices of any shape, with the backward that
// adds each output row's gradient into its weight row (repeated indices add).
#pragma once

#include "framework/tensor.h"

namespace mantissa {

// weight [V, D] (floating), indices i64 or i32 of any shape with values in [0, V) -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);

}  // namespace mantissa
