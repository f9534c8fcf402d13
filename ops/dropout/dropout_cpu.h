// Dropout kernels: the keep-mask drawn from a Generator, and the masked, scaled copy used both by the
// forward (on x) and the backward (on the gradient).
#pragma once

#include <cstdint>

#include "framework/generator.h"

namespace mantissa::cpu {

// mask[i] = uniform_float() < keep, drawn in element order, so one seed gives one mask.
void dropout_mask(Generator& generator, float keep, bool* mask, int64_t n);

// out[i] = mask[i] ? x[i] * scale : 0, computed in compute_t<T> and rounded once.
template <typename T>
void dropout_apply(const T* x, const bool* mask, double scale, T* out, int64_t n);

}  // namespace mantissa::cpu
