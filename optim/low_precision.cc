// The tables of optim/low_precision.h.
#include "optim/low_precision.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "optim/dynamic_map_bits.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace mantissa::low_precision {
namespace {

constexpr uint32_t kSignedBits[kMapSize] = {MT_DYNAMIC_MAP_SIGNED_BITS};
constexpr uint32_t kUnsignedBits[kMapSize] = {MT_DYNAMIC_MAP_UNSIGNED_BITS};

struct Maps {
  float is_signed[kMapSize], is_unsigned[kMapSize];
  Maps() {
    for (int i = 0; i < kMapSize; ++i) {
      is_signed[i] = std::bit_cast<float>(kSignedBits[i]);
      is_unsigned[i] = std::bit_cast<float>(kUnsignedBits[i]);
    }
  }
};

const Maps& maps() {
  static const Maps m;
  return m;
}

// floor_index_fast's tables: per top-16-bit prefix, floor_index of the prefix's smallest float (0 for nan
// prefixes), as bytes for the scalar lookup and as 32-bit words for the AVX2 gathers; `steps`, the most entries
// any float lies above its prefix's (the vector path's fixed number of steps up); `padded`, the maps with +inf
// after the last entry, so that a step up from entry 255 reads a value (clamped back to 255 after).
struct FloorTables {
  uint8_t below[2][1 << 16];
  int32_t below32[2][1 << 16];
  float padded[2][kMapSize + 1];
  int steps = 0;
  FloorTables() {
    for (int s = 0; s < 2; ++s) {
      const float* map = s == 0 ? maps().is_signed : maps().is_unsigned;
      for (int i = 0; i < kMapSize; ++i) padded[s][i] = map[i];
      padded[s][kMapSize] = INFINITY;
      for (uint32_t h = 0; h < (1u << 16); ++h) {
        // Negative floats grow more negative with their bits: the prefix's smallest has all low bits set, its
        // largest none.
        const bool negative = (h & 0x8000u) != 0;
        const float smallest = float_of(negative ? (h << 16) | 0xffffu : h << 16);
        const float largest = float_of(negative ? h << 16 : (h << 16) | 0xffffu);
        below[s][h] = static_cast<uint8_t>(smallest != smallest ? 0 : floor_index(map, smallest));
        below32[s][h] = below[s][h];
        if (largest == largest) steps = std::max(steps, floor_index(map, largest) - below[s][h]);
      }
    }
  }
};

const FloorTables& floor_tables() {
  static const FloorTables t;
  return t;
}

}  // namespace

const float* dynamic_map(bool is_signed) { return is_signed ? maps().is_signed : maps().is_unsigned; }

namespace {

// floor_index_fast with the map and its table in hand (the quantizer's loop hoists them).
inline int floor_index_with(const float* map, const uint8_t* below, float v) {
  if (v != v) return 0;  // as the binary search: no entry is <= nan
  int lo = below[bits_of(v) >> 16];
  while (lo + 1 < kMapSize && map[lo + 1] <= v) ++lo;
  return lo;
}

}  // namespace

int floor_index_fast(bool is_signed, float v) {
  return floor_index_with(dynamic_map(is_signed), floor_tables().below[is_signed ? 0 : 1], v);
}

namespace {

// One value's code: x / m (m > 0; else 0) to the nearest entry, or the entry at or above it.
inline uint8_t code_scalar(const float* map, const uint8_t* below, float x, float m, CodeRounding rounding) {
  const float v = m > 0.0f ? x / m : 0.0f;
  const uint8_t nearest = nearer_of(map, floor_index_with(map, below, v), v);
  return rounding == CodeRounding::kUp ? at_or_above(map, nearest, v) : nearest;
}

#if defined(__AVX2__)
// max |x| with the scalar loop's rule (std::max(m, |x|) keeps m when |x| is a nan): vmaxps(a, m) returns m when
// either is a nan, and the lanes' maxima combine in any order.
float absmax_avx2(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vm = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), vm);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vm);
  float m = 0.0f;
  for (float l : lanes) m = std::max(m, l);
  for (; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// code_scalar for 8 values at once (the library's baseline is x86-64-v3): the same divisions, table lookup, steps
// up and comparisons, as gathers and selects; the same codes (tests/optim/low_precision_test.cc).
void codes_avx2(const FloorTables& t, int s, const float* x, int64_t n, float m, CodeRounding rounding,
                uint8_t* codes) {
  const float* map = t.padded[s];
  const __m256 vm = _mm256_set1_ps(m);
  const bool zero = !(m > 0.0f);
  const __m256i one = _mm256_set1_epi32(1), last = _mm256_set1_epi32(kMapSize - 1);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  alignas(32) int32_t out[8];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = zero ? _mm256_setzero_ps() : _mm256_div_ps(_mm256_loadu_ps(x + i), vm);
    __m256i lo = _mm256_i32gather_epi32(t.below32[s], _mm256_srli_epi32(_mm256_castps_si256(v), 16), 4);
    for (int k = 0; k < t.steps; ++k) {  // up while the next entry is <= v (the padding's inf never is, but inf)
      const __m256 next = _mm256_i32gather_ps(map, _mm256_add_epi32(lo, one), 4);
      const __m256i up = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(next, v, _CMP_LE_OQ)), one);
      lo = _mm256_min_epi32(_mm256_add_epi32(lo, up), last);
    }
    lo = _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)), lo);  // nan: entry 0
    const __m256i hi = _mm256_min_epi32(_mm256_add_epi32(lo, one), last);
    const __m256 ml = _mm256_i32gather_ps(map, lo, 4), mh = _mm256_i32gather_ps(map, hi, 4);
    const __m256 dl = _mm256_and_ps(_mm256_sub_ps(v, ml), abs_mask), dh = _mm256_and_ps(_mm256_sub_ps(mh, v), abs_mask);
    __m256i code = _mm256_blendv_epi8(lo, hi, _mm256_castps_si256(_mm256_cmp_ps(dh, dl, _CMP_LT_OQ)));
    if (rounding == CodeRounding::kUp) {
      const __m256 mc = _mm256_i32gather_ps(map, code, 4);
      const __m256i below_v = _mm256_castps_si256(_mm256_cmp_ps(mc, v, _CMP_LT_OQ));
      code = _mm256_min_epi32(_mm256_add_epi32(code, _mm256_and_si256(below_v, one)), last);
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), code);
    for (int k = 0; k < 8; ++k) codes[i + k] = static_cast<uint8_t>(out[k]);
  }
  for (; i < n; ++i) codes[i] = code_scalar(t.padded[s], t.below[s], x[i], m, rounding);
}
#endif

}  // namespace

void quantize_blockwise(const float* x, int64_t n, int64_t block, bool is_signed, uint8_t* codes, float* absmax,
                        CodeRounding rounding) {
  const FloorTables& t = floor_tables();
  const int s = is_signed ? 0 : 1;
  for (int64_t b0 = 0, k = 0; b0 < n; b0 += block, ++k) {
    const int64_t b1 = std::min(n, b0 + block);
#if defined(__AVX2__)
    const float m = absmax_avx2(x + b0, b1 - b0);
    absmax[k] = m;
    codes_avx2(t, s, x + b0, b1 - b0, m, rounding, codes + b0);
#else
    float m = 0.0f;
    for (int64_t i = b0; i < b1; ++i) m = std::max(m, std::fabs(x[i]));
    absmax[k] = m;
    for (int64_t i = b0; i < b1; ++i) codes[i] = code_scalar(t.padded[s], t.below[s], x[i], m, rounding);
#endif
  }
}

void dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block, bool is_signed,
                          float* out) {
  const float* map = dynamic_map(is_signed);
  for (int64_t i = 0; i < n; ++i) out[i] = map[codes[i]] * absmax[i / block];
}

}  // namespace mantissa::low_precision
