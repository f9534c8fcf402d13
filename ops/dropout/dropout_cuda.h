// The CUDA kernels of ops/dropout/dropout.cc. The mask comes from the generator's own Philox stream, drawn on the
// device (ops/cuda/philox.h): the same mask as the CPU draws, and the generator advances past the words
// used, as on the CPU. Declared in every build; defined in dropout.cu, which only CUDA builds
// compile.
#pragma once

#include "framework/generator.h"
#include "framework/tensor.h"

namespace mantissa {

// out = mask ? t * scale : 0; t, mask and out contiguous.
void cuda_masked_scale(const Tensor& t, const Tensor& mask, double scale, const Tensor& out);
// Draws mask (keep with probability keep) from gen and writes out = mask ? x * scale : 0 in one pass.
void cuda_dropout(const Tensor& x, float keep, double scale, Generator& gen, const Tensor& mask, const Tensor& out);

}  // namespace mantissa
