// Bulk conversions between f32 and the 16-bit float types, bit-exact with the scalar Half/BFloat16
// conversions (round to nearest even). Vectorized where the CPU allows (F16C, AVX512_BF16).
#pragma once

#include <cstdint>

#include "framework/half.h"

namespace mantissa {

void convert(const float* src, Half* dst, int64_t n);
void convert(const Half* src, float* dst, int64_t n);
void convert(const float* src, BFloat16* dst, int64_t n);
void convert(const BFloat16* src, float* dst, int64_t n);

}  // namespace mantissa
