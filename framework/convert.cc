// Bulk f32 <-> f16/bf16 conversion: a scalar reference and AVX2/F16C and AVX-512 kernels, all bit-exact
// with the scalar Half/BFloat16 conversions. Each vector kernel handles whole vectors and hands the tail
// (n not a multiple of its width) to the scalar loop.
#include "framework/convert.h"

#include <immintrin.h>

#include "framework/error.h"
#include "framework/parallel.h"

namespace mantissa {
namespace {

// ---- scalar reference ----

void f32_to_f16_scalar(const float* src, Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]);
}
void f16_to_f32_scalar(const Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void f32_to_bf16_scalar(const float* src, BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16(src[i]);
}
void bf16_to_f32_scalar(const BFloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// ---- AVX2 + F16C (8 lanes) ----
// f16: the F16C instructions round to nearest even with the rounding given in the instruction (not
// MXCSR) and keep subnormals, so they agree with the scalar path. bf16 has no AVX2 instruction; its
// rounding is done on the integer bits exactly as float_to_bf16_bits does it.

#define MT_AVX2 __attribute__((target("avx2,f16c")))

MT_AVX2 void f32_to_f16_avx2(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  f32_to_f16_scalar(src + i, dst + i, n - i);
}

MT_AVX2 void f16_to_f32_avx2(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  f16_to_f32_scalar(src + i, dst + i, n - i);
}

// Eight floats -> eight bf16 bit patterns, each in the low half of a 32-bit lane.
MT_AVX2 inline __m256i bf16_round_avx2(__m256i x) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
  // nan: keep sign and payload top bits, set the quiet bit (adding the bias could carry into inf).
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

MT_AVX2 void f32_to_bf16_avx2(const float* src, BFloat16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b = bf16_round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // Values are in [0, 0xffff], so unsigned saturation packs them unchanged; packus works per 128-bit
    // lane (a0-3 b0-3 a4-7 b4-7), and the permute restores a0-7 b0-7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  f32_to_bf16_scalar(src + i, dst + i, n - i);
}

MT_AVX2 void bf16_to_f32_avx2(const BFloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
  bf16_to_f32_scalar(src + i, dst + i, n - i);
}

#undef MT_AVX2

// ---- AVX-512 (16 lanes) ----
// f32 -> bf16 does not use AVX512_BF16's VCVTNEPS2BF16: it flushes subnormal inputs to zero (PyTorch
// and the scalar path round them) and quiets nans differently. The integer rounding below is exact and
// still runs at memory bandwidth.

#define MT_AVX512 __attribute__((target("avx512f,avx512bw")))
// GCC 12's unmasked AVX-512 intrinsics pass _mm512_undefined_*() as the merge source and then warn
// that it may be used uninitialized (a false positive: the mask is all ones).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

MT_AVX512 void f32_to_f16_avx512(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  f32_to_f16_scalar(src + i, dst + i, n - i);
}

MT_AVX512 void f16_to_f32_avx512(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  f16_to_f32_scalar(src + i, dst + i, n - i);
}

MT_AVX512 void f32_to_bf16_avx512(const float* src, BFloat16* dst, int64_t n) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i round_bias = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet_bit = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(round_bias, lsb)), 16);
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, abs_mask), inf);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), quiet_bit);
    const __m512i bits = _mm512_mask_blend_epi32(is_nan, rounded, quiet);
    // Truncating 32 -> 16 narrowing keeps the low half, which holds the whole result.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bits));
  }
  f32_to_bf16_scalar(src + i, dst + i, n - i);
}

MT_AVX512 void bf16_to_f32_avx512(const BFloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
  }
  bf16_to_f32_scalar(src + i, dst + i, n - i);
}

#pragma GCC diagnostic pop
#undef MT_AVX512

constexpr ConvertKernels kScalarKernels{f32_to_f16_scalar, f16_to_f32_scalar, f32_to_bf16_scalar, bf16_to_f32_scalar};
constexpr ConvertKernels kAvx2Kernels{f32_to_f16_avx2, f16_to_f32_avx2, f32_to_bf16_avx2, bf16_to_f32_avx2};
constexpr ConvertKernels kAvx512Kernels{f32_to_f16_avx512, f16_to_f32_avx512, f32_to_bf16_avx512, bf16_to_f32_avx512};

const ConvertKernels& best_kernels() {
  static const ConvertKernels& k = convert_kernels(convert_isa());
  return k;
}

// Conversion is memory-bound; below this many elements a second thread costs more than it saves.
constexpr int64_t kParallelGrain = int64_t{1} << 18;

template <typename S, typename D>
void run(void (*kernel)(const S*, D*, int64_t), const S* src, D* dst, int64_t n) {
  parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) { kernel(src + begin, dst + begin, end - begin); });
}

}  // namespace

std::string_view convert_isa_name(ConvertIsa isa) {
  switch (isa) {
    case ConvertIsa::kScalar: return "scalar";
    case ConvertIsa::kAvx2: return "avx2";
    case ConvertIsa::kAvx512: return "avx512";
  }
  return "?";
}

bool convert_isa_supported(ConvertIsa isa) {
  __builtin_cpu_init();  // needed when called from a static initializer that runs before libgcc's
  switch (isa) {
    case ConvertIsa::kScalar: return true;
    case ConvertIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case ConvertIsa::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }
  return false;
}

ConvertIsa convert_isa() {
  static const ConvertIsa best = convert_isa_supported(ConvertIsa::kAvx512) ? ConvertIsa::kAvx512
                                 : convert_isa_supported(ConvertIsa::kAvx2) ? ConvertIsa::kAvx2
                                                                            : ConvertIsa::kScalar;
  return best;
}

const ConvertKernels& convert_kernels(ConvertIsa isa) {
  MT_CHECK(convert_isa_supported(isa), "convert_kernels: this CPU does not support ", convert_isa_name(isa),
           ". HINT: ask for convert_isa(), the best one it supports");
  switch (isa) {
    case ConvertIsa::kScalar: return kScalarKernels;
    case ConvertIsa::kAvx2: return kAvx2Kernels;
    case ConvertIsa::kAvx512: return kAvx512Kernels;
  }
  return kScalarKernels;
}

void convert(const float* src, Half* dst, int64_t n) { run(best_kernels().f32_to_f16, src, dst, n); }
void convert(const Half* src, float* dst, int64_t n) { run(best_kernels().f16_to_f32, src, dst, n); }
void convert(const float* src, BFloat16* dst, int64_t n) { run(best_kernels().f32_to_bf16, src, dst, n); }
void convert(const BFloat16* src, float* dst, int64_t n) { run(best_kernels().bf16_to_f32, src, dst, n); }

}  // namespace mantissa
