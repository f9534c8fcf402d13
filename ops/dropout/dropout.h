// dropout: zeroes each element with probability p and scales the survivors by 1 / (1 - p). The mask
// comes from a Generator (default_generator() when none is given), so a seed reproduces it.
#pragma once

#include "framework/generator.h"
#include "framework/tensor.h"

namespace mantissa {

// Always applies (modules decide train/eval). p = 0 returns x itself; p = 1 returns zeros (and zero
// gradients) without drawing from the generator.
Tensor dropout(const Tensor& x, double p, Generator* generator = nullptr);

}  // namespace mantissa
