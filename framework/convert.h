// Bulk conversions between f32 and the 16-bit float types, bit-exact with the scalar Half/BFloat16
// conversions (round to nearest even). Vectorized where the CPU allows (F16C, AVX2, AVX-512), chosen
// once at run time from cpuid.
#pragma once

#include <cstdint>
#include <string_view>

#include "framework/half.h"

namespace mantissa {

void convert(const float* src, Half* dst, int64_t n);
void convert(const Half* src, float* dst, int64_t n);
void convert(const float* src, BFloat16* dst, int64_t n);
void convert(const BFloat16* src, float* dst, int64_t n);

// The instruction sets the converters come in. kAvx2 is the baseline the library is built for
// (x86-64-v3: AVX2 and F16C); kAvx512 needs AVX512F and AVX512BW.
enum class ConvertIsa { kScalar, kAvx2, kAvx512 };
std::string_view convert_isa_name(ConvertIsa isa);
bool convert_isa_supported(ConvertIsa isa);  // by this CPU
ConvertIsa convert_isa();                    // the one convert() uses: the best supported

// One set of converters, for tests and benchmarks that compare instruction sets; convert() above is
// what everything else calls.
struct ConvertKernels {
  void (*f32_to_f16)(const float* src, Half* dst, int64_t n);
  void (*f16_to_f32)(const Half* src, float* dst, int64_t n);
  void (*f32_to_bf16)(const float* src, BFloat16* dst, int64_t n);
  void (*bf16_to_f32)(const BFloat16* src, float* dst, int64_t n);
};
// Throws mantissa::Error when this CPU does not support `isa`.
const ConvertKernels& convert_kernels(ConvertIsa isa);

}  // namespace mantissa
